/**
 * `kb-export backup --media-dir` (a child process) against the real server and PostgreSQL, behind
 * a front that serves media on the same origin, as a media proxy beside the API does, with faults
 * injected for real: a 404 (listed as missing, exit 4), a 500 then a 200, a 429 whose Retry-After
 * is waited for, a slow body, a body that stalls past --media-timeout, a connection reset mid-file,
 * and a redirect to another origin (a second server, as presigned object-store URLs are), which
 * never receives the API key. The files land at their paths below the prefix, percent-decoded,
 * each fetched once however often the export names it; `sha256sum -c PATH.sha256` (the real one)
 * and `kb-export verify` pass; an unchanged second backup fetches nothing it holds and leaves the
 * manifest and PATH.sha256 byte for byte, mtime included; --media-refresh fetches everything
 * again; a 304 keeps the manifest; a backup without --media-dir still writes both files.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runBackupCli, runCli } from '../helpers/backup-cli.js';
import { createTestDatabase } from '../helpers/db.js';
import { startStub } from '../helpers/export-stub.js';
import { startFront } from '../helpers/media-front.js';

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
/** What the media server holds at a path: deterministic bytes, `size` of them. */
const content = (p: string, size = 8 * 1024) => Buffer.alloc(size, `media ${p}\n`);

const db = await createTestDatabase(t);
await seed(
  db.sql,
  simpleSeed([
    doc('d1', 'a1', {
      cover: { url: 'covers/1.jpg', position: 'center' },
      contentHtml:
        '<p><img src="uploads/a.png" srcset="uploads/a.png 1x, uploads/a@2x.png 2x"></p><a download href="files/report%20v2.pdf">report</a><a href="other-doc">a link</a>',
    }),
    doc('d2', 'a2', {
      contentHtml: '<img src="./uploads/a.png"><video src="faults/slow.bin" poster="faults/500-then-200.png"></video>',
    }),
    doc('d3', 'a3', {
      contentHtml:
        '<img src="faults/404.png"><img src="faults/429.png"><img src="faults/reset.bin"><img src="faults/stall.bin"><img src="faults/redirect.png">',
    }),
  ]),
);
const server = await startServer(t, {}, db);

// The object store a redirect leads to: another origin.
const storeBytes = content('store', 20_000);
const store = await startStub(t, (_req, res) => {
  res.writeHead(200, { 'content-type': 'image/png', 'content-length': storeBytes.length });
  res.end(storeBytes);
});

const seen = new Map<string, number>();
const SLOW = content('slow', 64 * 1024);
const BIG = content('big', 100 * 1024);
const front = await startFront(t, server.url, (req, res) => {
  const url = req.url ?? '';
  const n = (seen.get(url) ?? 0) + 1;
  seen.set(url, n);
  const send = (bytes: Buffer, type = 'application/octet-stream') => {
    res.writeHead(200, { 'content-type': type, 'content-length': bytes.length });
    res.end(bytes);
  };
  switch (url) {
    case '/media/faults/404.png':
      res.writeHead(404).end();
      return;
    case '/media/faults/500-then-200.png':
      if (n === 1) res.writeHead(500).end();
      else send(content(url), 'image/png');
      return;
    case '/media/faults/429.png':
      if (n === 1) res.writeHead(429, { 'retry-after': '1' }).end();
      else send(content(url), 'image/png');
      return;
    case '/media/faults/slow.bin': {
      // 64 KB in eight pieces 150 ms apart: slow, but never silent for --media-timeout.
      res.writeHead(200, { 'content-length': SLOW.length });
      let i = 0;
      const timer = setInterval(() => {
        if (res.destroyed) return clearInterval(timer);
        res.write(SLOW.subarray(i * 8192, (i + 1) * 8192));
        if (++i === 8) {
          clearInterval(timer);
          res.end();
        }
      }, 150);
      return;
    }
    case '/media/faults/stall.bin':
      // The first answer stops halfway and says nothing more: the client gives up after its timeout.
      if (n === 1) {
        res.writeHead(200, { 'content-length': BIG.length });
        res.write(BIG.subarray(0, BIG.length / 2));
        setTimeout(() => res.destroy(), 5000).unref();
      } else send(BIG);
      return;
    case '/media/faults/reset.bin':
      if (n === 1) {
        res.writeHead(200, { 'content-length': BIG.length });
        res.write(BIG.subarray(0, 40 * 1024), () => res.socket?.resetAndDestroy());
      } else send(BIG);
      return;
    case '/media/faults/redirect.png':
      res.writeHead(302, { location: `${store.base}/bucket/object.png?X-Amz-Signature=abc` }).end();
      return;
    default:
      send(content(url), url.endsWith('.pdf') ? 'application/pdf' : 'image/png');
  }
});

const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-media-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const out = path.join(dir, 'kb.json');
const mediaDir = path.join(dir, 'media');
const args = [
  '--server',
  front.base,
  '--book',
  'kb',
  '--out',
  out,
  '--media-dir',
  mediaDir,
  '--media-concurrency',
  '4',
  '--media-timeout',
  '1',
  '--retries',
  '3',
];

interface Manifest {
  changeToken: string;
  etag: string;
  export: { file: string; bytes: number; sha256: string; documents: number };
  mediaPrefix: string;
  mediaDir: string;
  media: {
    path: string | null;
    url: string;
    bytes?: number;
    sha256?: string;
    contentType?: string;
    missing?: string;
    status?: number | null;
  }[];
  summary: { files: number; bytes: number; missing: number };
}
const manifest = (file = out) => JSON.parse(readFileSync(`${file}.manifest.json`, 'utf8')) as Manifest;
const stamp = (file: string) => ({ bytes: readFileSync(file), mtime: statSync(file).mtimeMs });

/** The files the export names and what the media server answered for them in the end. */
const EXPECTED: Record<string, Buffer> = {
  'covers/1.jpg': content('/media/covers/1.jpg'),
  'uploads/a.png': content('/media/uploads/a.png'),
  'uploads/a@2x.png': content('/media/uploads/a@2x.png'),
  'files/report v2.pdf': content('/media/files/report%20v2.pdf'),
  'faults/slow.bin': SLOW,
  'faults/500-then-200.png': content('/media/faults/500-then-200.png'),
  'faults/429.png': content('/media/faults/429.png'),
  'faults/reset.bin': BIG,
  'faults/stall.bin': BIG,
  'faults/redirect.png': storeBytes,
};

t.test('a first backup: every media file at its path, faults retried, the 404 listed, exit 4', async (t) => {
  const r = await runBackupCli(args);
  t.equal(r.code, 4, r.stderr);
  t.match(r.stderr, /media: 10 files, \d+ bytes in .* \(10 fetched, \d+ bytes; 0 already there\), 1 missing/);
  t.match(
    r.stderr,
    /kb-export backup: the export was saved, but 1 media is missing \(listed in .*kb\.json\.manifest\.json with why\)/,
  );
  for (const [p, bytes] of Object.entries(EXPECTED))
    t.ok(readFileSync(path.join(mediaDir, p)).equals(bytes), `${p} holds the media's bytes`);
  t.same(
    readdirSync(mediaDir).filter((f) => f.endsWith('.tmp')),
    [],
    'no temporary file left',
  );

  const m = manifest();
  t.equal(m.mediaPrefix, '/media/', "the response's Export-Media-Prefix");
  t.equal(m.mediaDir, 'media', "DIR relative to PATH's folder");
  t.same(m.export, { file: 'kb.json', bytes: statSync(out).size, sha256: sha256(readFileSync(out)), documents: 3 });
  t.match(m.etag, /^(W\/)?"kbx/);
  t.ok(m.changeToken.length > 10, 'the change token');
  t.same(
    m.media.map((e) => e.path),
    [...Object.keys(EXPECTED), 'faults/404.png'].sort(),
    'each path once, in order',
  );
  for (const e of m.media.filter((x) => x.sha256 !== undefined)) {
    t.same(
      { bytes: e.bytes, sha256: e.sha256 },
      { bytes: EXPECTED[e.path!]!.length, sha256: sha256(EXPECTED[e.path!]!) },
      `${e.path}: size and hash`,
    );
  }
  t.match(
    m.media.find((e) => e.path === 'faults/404.png'),
    { url: '/media/faults/404.png', missing: '404 Not Found', status: 404 },
  );
  t.match(
    m.media.find((e) => e.path === 'files/report v2.pdf'),
    { url: '/media/files/report%20v2.pdf', contentType: 'application/pdf' },
  );
  t.same(m.summary, { files: 10, bytes: Object.values(EXPECTED).reduce((n, b) => n + b.length, 0), missing: 1 });

  t.equal(front.requestsOf('/media/uploads/a.png').length, 1, 'named three times, fetched once');
  t.equal(front.requestsOf('/media/faults/404.png').length, 1, 'a 404 is not retried');
  t.equal(front.requestsOf('/media/faults/500-then-200.png').length, 2, 'a 500 is');
  const [first, second] = front.requestsOf('/media/faults/429.png');
  t.ok(second!.at - first!.at >= 950, `Retry-After: 1 was waited for (${second!.at - first!.at} ms)`);
  t.equal(front.requestsOf('/media/faults/reset.bin').length, 2, 'a reset mid-file is retried');
  t.equal(front.requestsOf('/media/faults/stall.bin').length, 2, 'a stall past --media-timeout is retried');
  t.equal(front.requestsOf('/media/faults/slow.bin').length, 1, 'a slow body that keeps coming is not');
  t.equal(
    front.requestsOf('/media/faults/redirect.png')[0]!.headers.authorization,
    'Bearer kbx_u1',
    "the key goes to the server's own origin",
  );
  t.equal(store.requests.length, 1);
  t.equal(store.requests[0]!.url, '/bucket/object.png?X-Amz-Signature=abc');
  t.equal(store.requests[0]!.headers.authorization, undefined, 'and never across origins');
  t.notOk(
    front.requests.some((q) => q.url.startsWith('/media/other-doc')),
    'a link that is no attachment is not media',
  );
});

t.test('sha256sum -c PATH.sha256 and kb-export verify pass on the fresh backup', async (t) => {
  const sums = readFileSync(`${out}.sha256`, 'utf8');
  t.match(sums, new RegExp(`^${sha256(readFileSync(out))}  kb\\.json\\n`), 'the export first, relative to its folder');
  t.match(sums, /  media\/files\/report v2\.pdf\n/, 'then each media file under DIR');
  t.equal(sums.split('\n').length - 1, 11);
  const checked = execFileSync('sha256sum', ['-c', 'kb.json.sha256'], { cwd: dir, encoding: 'utf8' });
  t.equal(checked.split('\n').filter((l) => l.endsWith(': OK')).length, 11, 'sha256sum: every line OK');
  const v = await runCli(['verify', out]);
  t.equal(v.code, 0, v.stdout.toString() + v.stderr);
  t.match(v.stderr, /verified .*kb\.json: 3 documents, 10 media files \(\d+ bytes\) in .*media, 1 listed as missing/);
});

t.test('an unchanged backup fetches only what is missing and rewrites neither file', async (t) => {
  const before = { manifest: stamp(`${out}.manifest.json`), sums: stamp(`${out}.sha256`) };
  const requests = front.requests.length;
  const r = await runBackupCli(args);
  t.equal(r.code, 4, r.stderr);
  t.match(r.stderr, /\(0 fetched, 0 bytes; 10 already there\), 1 missing.*unchanged/);
  t.same(
    front.requests
      .slice(requests)
      .map((q) => q.url)
      .filter((u) => u.startsWith('/media/')),
    ['/media/faults/404.png'],
    'only the missing one is asked for again',
  );
  t.same(stamp(`${out}.manifest.json`), before.manifest, 'the manifest: same bytes, same mtime');
  t.same(stamp(`${out}.sha256`), before.sums, 'PATH.sha256: same bytes, same mtime');
});

t.test('--media-refresh fetches every file again; the same bytes leave the files alone', async (t) => {
  const before = stamp(`${out}.manifest.json`);
  const r = await runBackupCli([...args, '--media-refresh']);
  t.equal(r.code, 4, r.stderr);
  t.match(r.stderr, /\(10 fetched, \d+ bytes; 0 already there\)/);
  t.equal(front.requestsOf('/media/uploads/a.png').length, 2);
  t.same(stamp(`${out}.manifest.json`), before);
});

t.test('a file changed in DIR is fetched again; a change to the export writes a new manifest', async (t) => {
  const victim = path.join(mediaDir, 'uploads/a.png');
  execFileSync('truncate', ['-s', '10', victim]);
  const token = manifest().changeToken;
  await db.sql`UPDATE documents SET name = 'renamed' WHERE id = 'd2'`;
  const r = await runBackupCli(args);
  t.equal(r.code, 4, r.stderr);
  t.match(r.stderr, /\(1 fetched, 8192 bytes; 9 already there\).*written/);
  t.ok(readFileSync(victim).equals(EXPECTED['uploads/a.png']!), 'the truncated file is whole again');
  const m = manifest();
  t.not(m.changeToken, token, 'a new export: its own change token');
  t.equal(m.export.sha256, sha256(readFileSync(out)));
  t.equal((await runCli(['verify', out])).code, 0);
});

t.test('--if-changed: a 304 keeps the manifest and fetches no media', async (t) => {
  const first = await runBackupCli([...args, '--if-changed']);
  t.equal(first.code, 4, first.stderr);
  const before = { manifest: stamp(`${out}.manifest.json`), sums: stamp(`${out}.sha256`) };
  const requests = front.requests.length;
  const again = await runBackupCli([...args, '--if-changed']);
  t.equal(again.code, 0, again.stderr);
  t.match(again.stderr, /unchanged/);
  t.equal(front.requests.length, requests, 'no media request');
  t.same({ manifest: stamp(`${out}.manifest.json`), sums: stamp(`${out}.sha256`) }, before);
});

t.test('--incremental: the merged file gets its manifest and media as a download does', async (t) => {
  const inc = path.join(dir, 'inc.json');
  const incArgs = [
    '--server',
    front.base,
    '--book',
    'kb',
    '--out',
    inc,
    '--media-dir',
    mediaDir,
    '--incremental',
    '--media-timeout',
    '1',
    '--retries',
    '0',
  ];
  const full = await runBackupCli(incArgs);
  t.equal(full.code, 4, full.stderr);
  await db.sql`UPDATE documents SET name = 'renamed again' WHERE id = 'd1'`;
  const merged = await runBackupCli(incArgs);
  t.equal(merged.code, 4, merged.stderr);
  t.match(merged.stderr, /merged .*inc\.json/);
  t.match(merged.stderr, /\(0 fetched, 0 bytes; 10 already there\), 1 missing/, 'the same DIR serves both backups');
  const m = manifest(inc);
  t.same(m.export, { file: 'inc.json', bytes: statSync(inc).size, sha256: sha256(readFileSync(inc)), documents: 3 });
  t.equal(
    m.changeToken,
    (JSON.parse(readFileSync(`${inc}.token`, 'utf8')) as { token: string }).token,
    "the delta's token",
  );
  t.equal((await runCli(['verify', inc])).code, 0);
});

t.test('without --media-dir: the manifest and PATH.sha256 of the export alone', async (t) => {
  const plain = path.join(dir, 'plain.json.gz');
  const r = await runBackupCli(['--server', front.base, '--book', 'kb', '--out', plain]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /plain\.json\.gz\.manifest\.json and .*plain\.json\.gz\.sha256 written/);
  const m = manifest(plain);
  t.equal(m.media, null);
  t.equal(m.mediaDir, null);
  t.same(
    m.export,
    { file: 'plain.json.gz', bytes: statSync(plain).size, sha256: sha256(readFileSync(plain)), documents: 3 },
    'the file as written, compressed',
  );
  t.equal(readFileSync(`${plain}.sha256`, 'utf8'), `${m.export.sha256}  plain.json.gz\n`);
  execFileSync('sha256sum', ['-c', '--quiet', 'plain.json.gz.sha256'], { cwd: dir });
  const v = await runCli(['verify', plain]);
  t.equal(v.code, 0, v.stdout.toString() + v.stderr);
});

t.test('usage errors exit 2 and download nothing', async (t) => {
  const cases: [string[], RegExp][] = [
    [['--out', '-', '--media-dir', mediaDir], /--media-dir needs a file/],
    [['--out', path.join(dir, 'x.json'), '--media-refresh'], /--media-refresh goes with --media-dir/],
    [['--out', path.join(mediaDir, 'x.json'), '--media-dir', mediaDir], /is inside --media-dir/],
    [
      ['--out', path.join(dir, 'x.json'), '--media-dir', mediaDir, '--media-concurrency', '0'],
      /--media-concurrency must be 1 to 64/,
    ],
  ];
  for (const [more, why] of cases) {
    const r = await runBackupCli(['--server', front.base, '--book', 'kb', ...more]);
    t.equal(r.code, 2, more.join(' '));
    t.match(r.stderr, why);
  }
});

t.test('a DIR that cannot be a folder: exit 1, the export saved, the last manifest left as it was', async (t) => {
  const before = stamp(`${out}.manifest.json`);
  const r = await runBackupCli([
    ...args.slice(0, args.indexOf('--media-dir')),
    '--media-dir',
    path.join(dir, 'plain.json.gz'),
  ]);
  t.equal(r.code, 1, r.stderr);
  t.match(r.stderr, /the export was saved, but cannot use --media-dir .*plain\.json\.gz/);
  t.same(stamp(`${out}.manifest.json`), before);
  t.same(
    readdirSync(dir).filter((f) => f.endsWith('.tmp')),
    [],
    'no temporary file left',
  );
});

t.test('a media server that never answers in time: listed, exit 4, the export kept', async (t) => {
  const silent = http.createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    silent.closeAllConnections();
    silent.close();
  });
  const port = (silent.address() as { port: number }).port;
  const body = JSON.stringify({
    success: true,
    book: { id: 'b' },
    documents: [{ id: 'x', cover: { url: `http://127.0.0.1:${port}/m/x.png` }, contentHtml: null }],
    meta: { count: 1 },
  });
  const api = await startStub(t, (_req, res) => {
    res.writeHead(200, { 'export-media-prefix': `http://127.0.0.1:${port}/m/` });
    res.end(body);
  });
  const file = path.join(dir, 'silent.json');
  const r = await runBackupCli([
    '--server',
    api.base,
    '--book',
    'kb',
    '--out',
    file,
    '--media-dir',
    path.join(dir, 'silent-media'),
    '--media-timeout',
    '1',
    '--retries',
    '1',
  ]);
  t.equal(r.code, 4, r.stderr);
  t.match(manifest(file).media, [{ path: 'x.png', status: null, missing: /timeout.*after 2 attempts/i }]);
  t.equal(api.requests.filter((q) => q.headers.authorization !== undefined).length, 1, 'the key went to the API');
});
