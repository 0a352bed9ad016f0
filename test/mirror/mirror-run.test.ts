/**
 * runMirror (src/mirror/mirror-command.ts) in this process, where the other mirror tests run the
 * executable: the same runs counted page by page, Markdown and HTML, media, the fallback with a
 * small budget, --git, progress, and the refusals of a state file that is not a mirror's.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { runMirror, type MirrorOptions } from '../../src/mirror/mirror-command.js';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { startFront } from '../helpers/media-front.js';
import { treeOf } from '../helpers/mirror-files.js';

const server = await startServer(t);
const sql = server.db.sql;
await seed(
  sql,
  simpleSeed([
    doc('c1', 'a1', { type: 'category', slug: 'guide', name: 'Guide' }),
    doc('d1', 'a2', {
      parentId: 'c1',
      slug: 'pic',
      name: 'Pic',
      cover: { url: 'covers/c.png', position: 'center' },
      contentHtml: '<p>see <img src="uploads/p.png" alt="p"></p>',
    }),
    doc('big', 'a3', { slug: 'big', name: 'Big', contentHtml: `<p><a href="pic">pic</a>${'x'.repeat(5000)}</p>` }),
    doc('linker', 'a4', {
      slug: 'linker',
      name: 'Linker',
      contentHtml: '<p><a href="pic">a picture</a>, <a href="big.html#x">big</a>, <a href="nope">none</a></p>',
    }),
  ]),
);
const front = await startFront(t, server.url, (_req, res) => {
  res.writeHead(200, { 'content-type': 'image/png', 'content-length': 3 }).end('png');
});
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-run-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const env = { KB_EXPORT_API_KEY: 'kbx_u1' };
const options = (out: string, extra: Partial<MirrorOptions> = {}): MirrorOptions => ({
  server: front.base,
  book: 'kb',
  out,
  format: 'markdown',
  media: true,
  git: true,
  retries: 0,
  timeoutS: 30,
  quiet: false,
  mediaConcurrency: 2,
  mediaTimeoutS: 5,
  budget: { maxBytes: 1000, timeoutMs: 10_000, heapMb: 256 },
  ...extra,
});

t.test('Markdown with media, the fallback and git, then a change', async (t) => {
  const out = path.join(dir, 'md');
  const lines: string[] = [];
  const first = await runMirror(options(out), (l) => lines.push(l), env);
  t.match(first, {
    line: /mirror: 4 added, 0 changed, 0 moved, 0 deleted .*1 kept as HTML.*git: committed/,
    missing: null,
  });
  t.match(lines.join('\n'), /big\.md: kept as HTML, 5028 characters of HTML, over the budget of 1000/);
  const files = treeOf(out);
  t.match(
    files.get('guide/pic.md')!.toString(),
    /cover: \{"url":"\.\.\/media\/covers\/c\.png","position":"center"\}[\s\S]*!\[p\]\(\.\.\/media\/uploads\/p\.png\)/,
  );
  t.match(
    files.get('big.md')!.toString(),
    /<!-- kb-export mirror: kept as HTML \(5028 characters of HTML, over the budget of 1000\) -->\n\n<p><a href="guide\/pic\.md">pic<\/a>x+<\/p>\n$/,
  );
  t.equal(files.get('media/uploads/p.png')!.toString(), 'png');
  t.match(
    files.get('linker.md')!.toString(),
    /\n\[a picture\]\(guide\/pic\.md\), \[big\]\(big\.md#x\), \[none\]\(nope\)\n$/,
    'links to other documents lead to their pages',
  );

  await sql`UPDATE documents SET slug = 'picture' WHERE id = 'd1'`;
  await sql`UPDATE documents SET parent_id = 'c1' WHERE id = 'big'`;
  const second = await runMirror(options(out, { quiet: true }), () => {}, env);
  t.match(second.line, /0 added, 1 changed, 2 moved, 0 deleted/);
  t.ok(treeOf(out).has('guide/picture.md'));
  t.match(
    treeOf(out).get('linker.md')!.toString(),
    /\n\[a picture\]\(pic\), \[big\]\(guide\/big\.md#x\), \[none\]\(nope\)\n$/,
    'a page whose link targets moved is written again; a link whose slug went is left as stored',
  );
  const fresh = path.join(dir, 'md-fresh');
  await runMirror(options(fresh, { quiet: true }), () => {}, env);
  t.same(treeOf(fresh), treeOf(out), 'the incremental run equals a fresh mirror, byte for byte');
  t.equal(execFileSync('git', ['rev-list', '--count', 'HEAD'], { cwd: out }).toString(), '2\n');
});

t.test('an edit that keeps a page’s size is undone, and nothing else is touched', async (t) => {
  const out = path.join(dir, 'md');
  const page = path.join(out, 'linker.md');
  const before = readFileSync(page, 'utf8');
  const edited = before.replace('[a picture]', '[A picture]');
  t.equal(Buffer.byteLength(edited), Buffer.byteLength(before), 'the same size');
  t.not(edited, before);
  const mtimes = new Map([...treeOf(out).keys()].map((p) => [p, statSync(path.join(out, p)).mtimeMs]));
  writeFileSync(page, edited);
  utimesSync(page, new Date(mtimes.get('linker.md')!), new Date(mtimes.get('linker.md')!));
  const r = await runMirror(options(out, { quiet: true }), () => {}, env);
  t.match(r.line, /0 added, 1 changed, 0 moved, 0 deleted/);
  t.equal(readFileSync(page, 'utf8'), before, 'the page has its bytes again, though its mtime was put back too');
  const touched = [...treeOf(out).keys()].filter((p) => statSync(path.join(out, p)).mtimeMs !== mtimes.get(p));
  t.same(touched, ['linker.md'], 'every other file keeps its mtime');
  const again = await runMirror(options(out, { quiet: true }), () => {}, env);
  t.match(again.line, /0 added, 0 changed, 0 moved, 0 deleted in [\d.]+ s \(4 unchanged\)/);
});

t.test('--media switched off removes the media the mirror saved, and only those', async (t) => {
  const out = path.join(dir, 'md');
  t.ok(treeOf(out).has('media/uploads/p.png'));
  writeFileSync(path.join(out, 'media/mine.txt'), 'not the mirror’s');
  const r = await runMirror(options(out, { media: false, quiet: true }), () => {}, env);
  t.match(r.line, /git: committed/);
  const files = [...treeOf(out).keys()];
  t.same(
    files.filter((f) => f.startsWith('media/')),
    ['media/mine.txt'],
    'the saved media went, with the folders they left empty',
  );
  t.notOk(existsSync(path.join(out, 'media/uploads')));
  t.notOk(existsSync(path.join(out, '.kb-export/media-off.ndjson')), 'the list of what to remove went too');
  t.match(
    treeOf(out).get('guide/picture.md')!.toString(),
    /!\[p\]\(http:\/\/127\.0\.0\.1:\d+\/media\/uploads\/p\.png\)/,
  );
  const again = await runMirror(options(out, { media: true, quiet: true }), () => {}, env);
  t.match(again.line, /git: committed/);
  t.ok(treeOf(out).has('media/uploads/p.png'), 'switched on again, the media come back');
});

t.test('HTML without media: links to the server', async (t) => {
  const out = path.join(dir, 'html');
  const r = await runMirror(options(out, { format: 'html', media: false, git: false }), () => {}, env);
  t.match(r.line, /4 added/);
  t.match(treeOf(out).get('linker.html')!.toString(), '<a href="guide/big.html#x">big</a>');
  const page = treeOf(out).get('guide/picture.html')!.toString();
  t.match(page, /<img src="http:\/\/127\.0\.0\.1:\d+\/media\/uploads\/p\.png" alt="p" \/>/);
  t.match(page, /<h1>Pic<\/h1>/);
  t.match(
    treeOf(out).get('index.html')!.toString(),
    /<li><a href="guide\/index.html">Guide<\/a>\n<ul>\n<li><a href="guide\/picture.html">Pic<\/a><\/li>\n<li><a href="guide\/big.html">Big<\/a><\/li>\n<\/ul>\n<\/li>\n<li><a href="linker.html">Linker<\/a><\/li>\n<\/ul>/,
  );
});

t.test('--git in a repository made ahead, with its own identity', async (t) => {
  const out = path.join(dir, 'repo');
  execFileSync('git', ['init', '--quiet', out]);
  execFileSync('git', ['config', 'user.email', 'docs@example.com'], { cwd: out });
  execFileSync('git', ['config', 'user.name', 'Docs'], { cwd: out });
  const r = await runMirror(options(out, { media: false, quiet: true }), () => {}, env);
  t.match(r.line, /4 added.*git: committed/);
  t.equal(
    execFileSync('git', ['log', '--format=%ae %s'], { cwd: out }).toString(),
    'docs@example.com kb-export mirror: 4 added, 0 changed, 0 moved, 0 deleted\n',
  );
  t.match(readFileSync(path.join(out, '.git/info/exclude'), 'utf8'), /^\/\.kb-export\/$/m);
});

t.test('a state file that is not a mirror’s is refused', async (t) => {
  const out = path.join(dir, 'md');
  writeFileSync(path.join(out, '.kb-export/state.json'), '{"book":1}');
  const err = await runMirror(options(out), () => {}, env).catch((e: unknown) => e);
  t.equal((err as { exitCode?: number }).exitCode, 2, 'a usage error');
  await t.rejects(
    runMirror(options(out), () => {}, env),
    /is not a mirror's state: remove .*\.kb-export to mirror again/,
  );
  t.equal(readFileSync(path.join(out, '.kb-export/state.json'), 'utf8'), '{"book":1}', 'left as it was');
});
