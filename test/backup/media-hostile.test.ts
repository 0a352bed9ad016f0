/**
 * `kb-export backup --media-dir` against a hostile server (a stub: the real one never writes such
 * URLs) and a media folder that already holds symbolic links: nothing is written outside DIR,
 * whatever the export's URLs (`..`, `%2e%2e`, encoded slashes and backslashes, NUL, empty
 * segments), the names the media server sends (a redirect through `..`, Content-Disposition), or
 * the links in DIR (a folder and a file pointing outside). Each refusal is listed in the manifest
 * with why, the command exits 4, the good files are saved, and no temporary file is left. A chain
 * of five redirects is followed; one of six is not.
 */
import { createHash } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { runBackupCli } from '../helpers/backup-cli.js';
import { startStub } from '../helpers/export-stub.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'kbx-hostile-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const outside = path.join(root, 'outside');
const backups = path.join(root, 'backups');
const dir = path.join(backups, 'media');
mkdirSync(outside);
mkdirSync(dir, { recursive: true });
writeFileSync(path.join(outside, 'precious.txt'), 'do not touch');
// Links already in DIR, to a folder and to a file outside it.
symlinkSync(outside, path.join(dir, 'linked'));
symlinkSync(path.join(outside, 'precious.txt'), path.join(dir, 'file-link.png'));

const hostile = [
  '/media/../../outside/escape-1.txt',
  '/media/%2e%2e/%2E%2E/outside/escape-2.txt',
  '/media/..%2f..%2foutside%2fescape-3.txt',
  '/media/%2Foutside%2Fescape-9.txt',
  '/media/a%5C..%5C..%5Coutside%5Cescape-4.txt',
  '/media/nul%00escape-5.txt',
  '/media//outside/escape-6.txt',
  '/media/linked/escape-7.txt',
  '/media/file-link.png',
  '/media/..\\..\\outside\\escape-8.txt',
];
const html =
  [...hostile, '/media/ok/fine.png', '/media/redirected.png', '/media/hops5.png', '/media/hops6.png']
    .map((u) => `<img src="${u.replace(/"/g, '&quot;')}">`)
    .join('') + '<img src="https://elsewhere.example/media/x.png">';
const body = JSON.stringify({
  success: true,
  book: { id: 'b', slug: 'kb', name: 'KB' },
  documents: [{ id: 'd1', name: 'D', cover: { url: '/media/covers/c.png', position: 'center' }, contentHtml: html }],
  meta: { count: 1 },
});
const bytesOf = (p: string) => Buffer.from(`bytes of ${p}`);

const stub = await startStub(t, (req, res) => {
  const url = req.url ?? '';
  if (url.startsWith('/api/')) {
    res.writeHead(200, { 'content-type': 'application/json', 'export-media-prefix': '/media/', etag: '"hostile"' });
    res.end(body);
  } else if (/^\/media\/hops\d\.png$/.test(url) || /^\/r\/[2-9]$/.test(url)) {
    // A chain of redirects: hopsN.png -> /r/N -> … -> /r/1, which answers: N redirects in all.
    const n = Number(url.startsWith('/r/') ? url.slice(3) : url.slice('/media/hops'.length, -'.png'.length));
    res.writeHead(307, { location: `/r/${url.startsWith('/r/') ? n - 1 : n}` });
    res.end();
  } else if (url === '/media/redirected.png') {
    // A name the server sends is never used: the file goes where the export's URL says.
    res.writeHead(302, { location: '/media/../../../../outside/redirect-escape.png' });
    res.end();
  } else {
    res.writeHead(200, {
      'content-type': 'image/png',
      'content-disposition': 'attachment; filename="../../outside/disposition.png"',
    });
    res.end(bytesOf(url));
  }
});

t.test('nothing outside DIR; refusals listed; good files saved; exit 4', async (t) => {
  const out = path.join(backups, 'kb.json');
  const r = await runBackupCli([
    '--server',
    stub.base,
    '--book',
    'kb',
    '--out',
    out,
    '--media-dir',
    dir,
    '--retries',
    '0',
  ]);
  t.equal(r.code, 4, r.stderr);
  t.match(r.stderr, /the export was saved, but \d+ media are missing/);
  t.same(readdirSync(outside).sort(), ['precious.txt'], 'nothing new outside DIR');
  t.equal(readFileSync(path.join(outside, 'precious.txt'), 'utf8'), 'do not touch', 'the linked file is untouched');
  t.ok(lstatSync(path.join(dir, 'file-link.png')).isSymbolicLink(), 'the link in DIR is left as it was');
  t.same(
    readdirSync(dir).filter((f) => f.endsWith('.tmp')),
    [],
    'no temporary file',
  );

  const manifest = JSON.parse(readFileSync(`${out}.manifest.json`, 'utf8')) as {
    media: Record<string, unknown>[];
    summary: { files: number; missing: number };
  };
  const byUrl = new Map(manifest.media.map((e) => [e.url as string, e]));
  for (const u of hostile) {
    const e = byUrl.get(u);
    t.ok(e && typeof e.missing === 'string', `${u} is listed as missing: ${e?.missing as string}`);
  }
  t.match(byUrl.get('/media/linked/escape-7.txt'), {
    path: 'linked/escape-7.txt',
    missing: /linked is a symbolic link/,
  });
  t.match(byUrl.get('/media/file-link.png'), { path: 'file-link.png', missing: /symbolic link: not replaced/ });
  // Where a redirect leads is only where the bytes come from: they are kept at the export's path.
  const served = {
    '/media/ok/fine.png': '/media/ok/fine.png',
    '/media/covers/c.png': '/media/covers/c.png',
    '/media/redirected.png': '/outside/redirect-escape.png',
  };
  for (const [u, from] of Object.entries(served)) {
    const p = path.join(dir, u.slice('/media/'.length));
    t.ok(readFileSync(p).equals(bytesOf(from)), `${u} saved at its path`);
    t.match(byUrl.get(u), {
      bytes: bytesOf(from).length,
      sha256: createHash('sha256').update(bytesOf(from)).digest('hex'),
      contentType: 'image/png',
    });
  }
  t.match(
    byUrl.get('/media/hops5.png'),
    { path: 'hops5.png', bytes: bytesOf('/r/1').length },
    'five redirects are followed',
  );
  t.match(
    byUrl.get('/media/hops6.png'),
    { path: 'hops6.png', missing: 'more than 5 redirects', status: 307 },
    'a sixth is not',
  );
  t.equal(manifest.summary.files, 4);
  t.equal(manifest.summary.missing, hostile.length + 1);
  t.notOk(byUrl.has('https://elsewhere.example/media/x.png'), 'a URL outside the prefix is not media');
  t.notOk(existsSync(path.join(root, 'outside', 'disposition.png')));
});
