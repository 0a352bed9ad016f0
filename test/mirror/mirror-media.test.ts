/**
 * `kb-export mirror --media` (a child process) against the real server behind a front that serves
 * media, as `backup --media-dir` is tested: the media land in DIR/media/ through the backup's
 * downloader, every relative link and image of every page (Markdown and HTML formats, frontmatter
 * covers too) resolves to a file of the mirror, a medium that cannot be fetched stays an absolute
 * URL (exit 4, the page still written), the HTML format has no script left and its index links
 * every page, and each Markdown page parses back with contentStr's text.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { startFront } from '../helpers/media-front.js';
import { markdownText, relativeTargets, treeOf } from '../helpers/mirror-files.js';

const server = await startServer(t);
await seed(
  server.db.sql,
  simpleSeed([
    doc('c1', 'a1', { type: 'category', slug: 'guide', name: 'Guide' }),
    doc('c2', 'a2', { type: 'category', slug: 'deeper', name: 'Deeper', parentId: 'c1' }),
    doc('d1', 'a3', {
      parentId: 'c2',
      slug: 'pictures',
      name: 'Pictures',
      cover: { url: 'covers/1.jpg', position: 'top' },
      contentStr: 'Look here: report',
      contentHtml:
        '<p>Look <img src="uploads/a b.png" alt="a" srcset="uploads/a.png 1x, uploads/a@2x.png 2x"> here:</p><p><a download href="files/report.pdf">report</a></p><script>alert(1)</script>',
    }),
    doc('d2', 'a4', {
      slug: 'top',
      name: 'Top',
      contentStr: 'Missing one',
      contentHtml: '<p>Missing <img src="missing/404.png" alt="x"> one</p><p onclick="alert(2)">x</p>',
    }),
  ]),
);
const front = await startFront(t, server.url, (req, res) => {
  if ((req.url ?? '').startsWith('/media/missing/')) return void res.writeHead(404).end();
  const body = Buffer.from(`media ${req.url}`);
  res.writeHead(200, { 'content-type': 'image/png', 'content-length': body.length }).end(body);
});
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-media-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const mirror = (out: string, extra: string[]) =>
  runCli(['mirror', '--server', front.base, '--book', 'kb', '--out', out, '--media', '--retries', '0', ...extra]);

/** Every relative target of every page resolves to a file below `out`. */
function checkLinks(t: Test, out: string, files: Map<string, Buffer>): number {
  let n = 0;
  for (const [rel, bytes] of files) {
    if (!/\.(md|html)$/.test(rel)) continue;
    for (const target of relativeTargets(bytes.toString())) {
      const file = path.join(out, path.dirname(rel), decodeURIComponent(target));
      t.ok(existsSync(file) && file.startsWith(out + path.sep), `${rel} → ${target}`);
      n++;
    }
  }
  return n;
}

t.test('Markdown: media saved once, every link and image resolves locally', async (t) => {
  const out = path.join(dir, 'md');
  const r = await mirror(out, []);
  t.equal(r.code, 4, 'one medium is missing');
  t.match(r.stderr, /1 media is missing/);
  const files = treeOf(out);
  t.ok(files.has('media/uploads/a b.png') && files.has('media/covers/1.jpg') && files.has('media/files/report.pdf'));
  const page = files.get('guide/deeper/pictures.md')!.toString();
  t.match(page, /!\[a\]\(<?\.\.\/\.\.\/media\/uploads\/a%20b\.png>?\)/);
  t.match(page, /\[report\]\(\.\.\/\.\.\/media\/files\/report\.pdf\)/);
  t.ok(files.has('media/uploads/a.png') && files.has('media/uploads/a@2x.png'), 'srcset candidates saved');
  const [, front, body] = /^---\n([\s\S]*?)\n---\n\n([\s\S]*)$/.exec(page)!;
  const cover = (parseYaml(front!) as { cover: { url: string; position: string } }).cover;
  t.same(cover, { url: '../../media/covers/1.jpg', position: 'top' });
  t.ok(existsSync(path.join(out, 'guide/deeper', cover.url)), 'the cover resolves');
  t.equal(markdownText(body!), 'Look here: report', 'the script is gone and the text is contentStr');
  t.match(
    files.get('top.md')!.toString(),
    /!\[x\]\(http:\/\/127\.0\.0\.1:\d+\/media\/missing\/404\.png\)/,
    'a missing medium stays on the server',
  );
  t.ok(checkLinks(t, out, files) >= 6);
});

t.test('HTML: no script, an index that links every page, every link resolves', async (t) => {
  const out = path.join(dir, 'html');
  const r = await mirror(out, ['--format', 'html']);
  t.equal(r.code, 4, r.stderr);
  const files = treeOf(out);
  t.same(
    [...files.keys()].filter((f) => f.endsWith('.html')),
    ['guide/deeper/index.html', 'guide/deeper/pictures.html', 'guide/index.html', 'index.html', 'top.html'],
  );
  for (const [rel, bytes] of files) {
    if (!rel.endsWith('.html')) continue;
    t.notMatch(bytes.toString(), /<script|onclick|alert/i, `${rel} has no script`);
  }
  const index = files.get('index.html')!.toString();
  for (const p of ['guide/index.html', 'guide/deeper/index.html', 'guide/deeper/pictures.html', 'top.html'])
    t.match(index, `href="${p}"`, `the index links ${p}`);
  const pictures = files.get('guide/deeper/pictures.html')!.toString();
  t.match(pictures, /<a href="..\/..\/index.html">Contents<\/a>/);
  t.match(
    pictures,
    '<a download href="../../media/files/report.pdf">',
    'the stored markup kept, an empty attribute too',
  );
  t.match(
    pictures,
    'srcset="../../media/uploads/a.png 1x, ../../media/uploads/a%402x.png 2x"',
    'srcset candidates too',
  );
  t.ok(checkLinks(t, out, files) >= 10);
});
