/**
 * `kb-export verify PATH` (a child process) on a backup made by `kb-export backup --media-dir`
 * from the real server, here with an absolute MEDIA_PROXY_PREFIX (a media host of its own): a
 * fresh backup verifies with no problem; each damage is named on a line of its own and exits 1:
 * a flipped byte in the export, a truncated export, a truncated, changed, missing or linked media
 * file, a FIFO or a folder in a file's place, a manifest edited (a hash, an entry removed, the
 * document count) or missing, PATH.sha256 edited. A folder moved elsewhere verifies with --media-dir; usage errors exit 2.
 */
import { execFileSync } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runBackupCli, runCli } from '../helpers/backup-cli.js';
import { createTestDatabase } from '../helpers/db.js';
import { startStub } from '../helpers/export-stub.js';

const mediaHost = await startStub(t, (req, res) => {
  res.writeHead(200, { 'content-type': 'image/png' });
  res.end(Buffer.alloc(3000, `bytes of ${req.url}`));
});
const db = await createTestDatabase(t);
await seed(
  db.sql,
  simpleSeed([
    doc('d1', 'a1', {
      contentStr: 'plain text to flip a byte in',
      contentHtml: '<img src="img/a.png"><img srcset="img/b.png 1x, img/c.png 2x">',
      cover: { url: 'covers/d1.jpg' },
    }),
    doc('d2', 'a2', { contentHtml: '<a download href="files/notes.txt">notes</a><img src="img/a.png">' }),
  ]),
);
const server = await startServer(t, { MEDIA_PROXY_PREFIX: `${mediaHost.base}/m/` }, db);

const root = mkdtempSync(path.join(os.tmpdir(), 'kbx-verify-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const made = path.join(root, 'made');
mkdirSync(made);
const first = await runBackupCli([
  '--server',
  server.url,
  '--book',
  'kb',
  '--out',
  path.join(made, 'kb.json'),
  '--media-dir',
  path.join(made, 'media'),
]);
if (first.code !== 0) throw new Error(`the backup failed: ${first.stderr}`);

let copies = 0;
/** A fresh copy of the backup's folder, damaged by `damage`; resolves with verify's exit code and problem lines. */
async function verifyAfter(
  damage: (folder: string) => void,
  more: string[] = [],
): Promise<{ code: number; problems: string[]; stderr: string }> {
  const folder = path.join(root, `copy-${++copies}`);
  cpSync(made, folder, { recursive: true, verbatimSymlinks: true });
  damage(folder);
  const r = await runCli(['verify', path.join(folder, 'kb.json'), ...more]);
  return {
    code: r.code,
    problems: r.stdout
      .toString()
      .split('\n')
      .filter((l) => l !== ''),
    stderr: r.stderr,
  };
}

const editJson = (file: string, edit: (text: string) => string) =>
  writeFileSync(file, edit(readFileSync(file, 'utf8')));

t.test('a fresh backup verifies', async (t) => {
  const r = await verifyAfter(() => {});
  t.equal(r.code, 0, r.stderr);
  t.same(r.problems, []);
  t.match(
    r.stderr,
    /^verified .*kb\.json: 2 documents, 5 media files \(15000 bytes\) in .*media, 0 listed as missing\n$/,
  );
  const manifest = JSON.parse(readFileSync(path.join(made, 'kb.json.manifest.json'), 'utf8')) as {
    mediaPrefix: string;
    media: { url: string }[];
  };
  t.equal(manifest.mediaPrefix, `${mediaHost.base}/m/`, 'an absolute prefix');
  t.ok(
    manifest.media.every((e) => e.url.startsWith(`${mediaHost.base}/m/`)),
    'its URLs used as they are',
  );
});

t.test('a flipped byte in the export', async (t) => {
  const r = await verifyAfter((f) => editJson(path.join(f, 'kb.json'), (s) => s.replace('flip a byte', 'flip a bytf')));
  t.equal(r.code, 1);
  t.match(r.problems, [/kb\.json: SHA-256 [0-9a-f]{64}, the manifest says [0-9a-f]{64}$/]);
  t.equal(r.problems.length, 1, 'one problem: the media are all there');
});

t.test('a truncated export', async (t) => {
  const r = await verifyAfter((f) => truncateSync(path.join(f, 'kb.json'), 200));
  t.equal(r.code, 1);
  t.match(r.problems.join('\n'), /kb\.json: not a whole export/);
  t.match(r.problems.join('\n'), /kb\.json: 200 bytes, the manifest says \d+/);
});

t.test('a media file truncated, changed, missing, or a link in its place', async (t) => {
  const r = await verifyAfter((f) => {
    truncateSync(path.join(f, 'media/img/a.png'), 100);
    editJson(path.join(f, 'media/img/b.png'), (s) => `X${s.slice(1)}`);
    unlinkSync(path.join(f, 'media/img/c.png'));
    unlinkSync(path.join(f, 'media/files/notes.txt'));
    symlinkSync(path.join(made, 'media/files/notes.txt'), path.join(f, 'media/files/notes.txt'));
  });
  t.equal(r.code, 1);
  t.match(r.problems, [
    /notes\.txt: files\/notes\.txt is a symbolic link/,
    /img\/a\.png: 100 bytes, the manifest says 3000$/,
    /img\/b\.png: SHA-256 [0-9a-f]{64}, the manifest says/,
    /img\/c\.png: missing$/,
  ]);
});

t.test('a FIFO or a folder in place of a media file: not a regular file, and no wait on the FIFO', async (t) => {
  const r = await verifyAfter((f) => {
    unlinkSync(path.join(f, 'media/covers/d1.jpg'));
    execFileSync('mkfifo', [path.join(f, 'media/covers/d1.jpg')]);
    unlinkSync(path.join(f, 'media/img/b.png'));
    mkdirSync(path.join(f, 'media/img/b.png'));
  });
  t.equal(r.code, 1);
  t.match(r.problems, [/covers\/d1\.jpg: not a regular file$/, /img\/b\.png: not a regular file$/]);
  t.equal(r.problems.length, 2);
});

t.test('an edited manifest', async (t) => {
  const hash = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.manifest.json'), (s) =>
      s.replace(/("path":"img\/a\.png".*?"sha256":")[0-9a-f]/, '$1x'.replace('x', '0')),
    ),
  );
  t.equal(hash.code, 1);
  t.match(hash.problems.join('\n'), /img\/a\.png: SHA-256 [0-9a-f]{64}, the manifest says 0/);
  t.match(hash.problems.join('\n'), /kb\.json\.sha256: line \d+ is not what the manifest says/);

  const dropped = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.manifest.json'), (s) => s.replace(/\n\{"path":"img\/b\.png"[^\n]*,/, '')),
  );
  t.equal(dropped.code, 1);
  t.match(
    dropped.problems.join('\n'),
    /\/m\/img\/b\.png: a media URL of the export that .*kb\.json\.manifest\.json does not list/,
  );
  t.match(dropped.problems.join('\n'), /its summary .* is not what its media list holds/);

  const count = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.manifest.json'), (s) => s.replace('"documents":2', '"documents":3')),
  );
  t.match(count.problems, [/kb\.json: 2 documents, the manifest says 3/]);

  const broken = await verifyAfter((f) => editJson(path.join(f, 'kb.json.manifest.json'), (s) => s.slice(0, 100)));
  t.equal(broken.code, 1);
  t.match(broken.problems[0], /kb\.json\.manifest\.json is not JSON/);

  const gone = await verifyAfter((f) => unlinkSync(path.join(f, 'kb.json.manifest.json')));
  t.equal(gone.code, 1);
  t.match(gone.problems, [/kb\.json\.manifest\.json: missing/]);
});

t.test('a manifest laid out otherwise: read as JSON when whole, named when one line breaks the layout', async (t) => {
  const pretty = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.manifest.json'), (s) => `${JSON.stringify(JSON.parse(s), null, 2)}\n`),
  );
  t.equal(pretty.code, 0, `reformatted by another tool, the same manifest: ${pretty.problems.join('; ')}`);
  t.same(pretty.problems, []);

  const comma = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.manifest.json'), (s) => s.replace(/(\n\{"path":"img\/a\.png"[^\n]*),\n/, '$1\n')),
  );
  t.equal(comma.code, 1);
  t.match(comma.problems.join('\n'), /kb\.json\.manifest\.json: its media list cannot be read: line \d+ has no comma/);
});

t.test('an edited PATH.sha256', async (t) => {
  const r = await verifyAfter((f) =>
    editJson(path.join(f, 'kb.json.sha256'), (s) => s.replace('media/img/b.png', 'media/img/B.png')),
  );
  t.equal(r.code, 1);
  t.match(r.problems, [/kb\.json\.sha256: line \d+ is not what the manifest says/]);
});

t.test('a moved media folder, given with --media-dir', async (t) => {
  const elsewhere = path.join(root, 'elsewhere');
  const r = await verifyAfter((f) => renameSync(path.join(f, 'media'), elsewhere), ['--media-dir', elsewhere]);
  t.equal(r.code, 0, r.problems.join('\n'));
});

t.test('usage errors exit 2', async (t) => {
  t.equal((await runCli(['verify'])).code, 2);
  const missing = await runCli(['verify', path.join(root, 'nope.json')]);
  t.equal(missing.code, 2);
  t.match(missing.stderr, /no such file/);
});
