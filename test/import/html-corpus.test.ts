import t from 'tap';
import { mkdir, mkdtemp, readFile, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rewriteCorpusUrls } from '../../src/import/corpus-urls.js';
import { scanHtmlCorpus } from '../../src/import/html-corpus.js';
import type { SeedDocument } from '../../src/load/seed-types.js';
import { sourceUrl } from '../helpers/paths.js';

const corpus = fileURLToPath(sourceUrl(import.meta.url, './fixtures/corpus'));

async function scan(dir: string, bookId = 'b1'): Promise<SeedDocument[]> {
  const docs: SeedDocument[] = [];
  for await (const d of scanHtmlCorpus(dir, { bookId })) docs.push(d);
  return docs;
}

function byId(docs: SeedDocument[], id: string): SeedDocument {
  const d = docs.find((x) => x.id === id);
  if (!d) throw new Error(`no document ${id}`);
  return d;
}

/**
 * What import-html makes of `url` as an image's src in page `pagePath`: the value, escaped for a
 * double-quoted attribute, through rewriteCorpusUrls (the scanner's rewrite), read back unescaped.
 */
function resolveCorpusUrl(url: string, pagePath: string): string {
  const attr = (v: string) => `<img src="${v}">`;
  const out = rewriteCorpusUrls(attr(url.replaceAll('&', '&amp;').replaceAll('"', '&quot;')), pagePath).html;
  const value = /^<img src="(.*)">$/s.exec(out)?.[1];
  if (value === undefined) throw new Error(`not one image: ${out}`);
  return value.replaceAll('&quot;', '"').replaceAll('&amp;', '&');
}

/** The record scanHtmlCorpus makes of the page `html` at `pagePath` in a corpus of its own. */
async function scannedPage(html: string, pagePath: string): Promise<SeedDocument> {
  const dir = await mkdtemp(join(tmpdir(), 'kbx-corpus-'));
  try {
    await mkdir(join(dir, dirname(pagePath)), { recursive: true });
    await writeFile(join(dir, pagePath), html);
    return byId(await scan(dir), `b1:${pagePath}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

t.test('walk order, ids, parents, types', async (t) => {
  const docs = await scan(corpus);
  t.same(
    docs.map((d) => [d.id, d.type, d.parentId]),
    [
      ['b1:a b.html', 'document', null],
      ['b1:index.html', 'document', null],
      ['b1:library', 'category', null],
      ['b1:library/deep', 'category', 'b1:library'],
      ['b1:library/deep/nested', 'category', 'b1:library/deep'],
      ['b1:library/deep/nested/page.htm', 'document', 'b1:library/deep/nested'],
      ['b1:library/os.html', 'document', 'b1:library'],
      ['b1:zeta.html', 'document', null],
    ],
    'depth-first, sorted byte-wise; media-only folders (_images, media-only, img) and non-HTML files yield nothing',
  );

  // The export orders by orderKey COLLATE "C", then id: that must reproduce the walk.
  const sorted = [...docs].sort(
    (a, b) => Buffer.compare(Buffer.from(a.orderKey), Buffer.from(b.orderKey)) || (a.id < b.id ? -1 : 1),
  );
  t.same(
    sorted.map((d) => d.id),
    docs.map((d) => d.id),
    'byte-wise orderKey order equals walk order',
  );
  t.equal(new Set(docs.map((d) => d.orderKey)).size, docs.length, 'orderKeys are unique');
  for (const d of docs) t.match(d.orderKey, /^[0-9a-z]+$/, `orderKey of ${d.id} is ASCII letters/digits`);
  t.equal(new Set(docs.map((d) => d.orderKey.length)).size, 1, 'orderKeys share one width');

  const seen = new Set<string>();
  for (const d of docs) {
    if (d.parentId) t.ok(seen.has(d.parentId), `parent of ${d.id} comes first`);
    seen.add(d.id);
  }
});

t.test('slugs, names, fixed fields', async (t) => {
  const docs = await scan(corpus);
  t.same(
    docs.map((d) => [d.slug, d.name]),
    [
      ['a-b', 'a b'],
      ['index', 'Home & Welcome'],
      ['library', 'library'],
      ['library-deep', 'deep'],
      ['library-deep-nested', 'nested'],
      ['library-deep-nested-page', 'page'],
      ['library-os', 'Operating System\u00a0Notes'],
      ['zeta', 'zeta'],
    ],
    'title, else h1 text (entities decoded, ASCII whitespace collapsed), else file name',
  );
  for (const d of docs) {
    t.equal(d.status, 1);
    for (const k of [
      'description',
      'emojiInfo',
      'cover',
      'tags',
      'themeId',
      'backgroundThemeId',
      'bodyFontSize',
    ] as const) {
      t.equal(d[k], null, `${d.id} ${k}`);
    }
    t.match(d.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    t.equal(d.updatedAt, d.createdAt);
  }
  const cat = byId(docs, 'b1:library');
  t.equal(cat.contentHtml, null);
  t.equal(cat.contentStr, null);
});

t.test('contentHtml keeps the body bytes, rewriting only media URLs', async (t) => {
  const docs = await scan(corpus);

  t.equal(
    byId(docs, 'b1:index.html').contentHtml,
    '\n<h1>Ignored heading</h1>\n' +
      '<p>See <a href="library/os.html">the OS page</a> and <img src="https://example.com/logo.png" alt="logo">.</p>\n' +
      '<script>var hidden = 1;</script>\n',
    'normal links and absolute URLs untouched; nothing of </body> or after it',
  );

  t.equal(
    byId(docs, 'b1:library/os.html').contentHtml,
    '<h1>Operating  <em>System</em>&nbsp;Notes</h1>\n' +
      `<p>Figure: <IMG SRC="/_images/x.png?v=2#f" alt='x'> and <img src=/library/img/a.png></p>\n` +
      '<picture><source srcset="/library/img/a.png 1x, /library/img/a@2x.png 2x,/_images/x.png 3x"><img src="/abs/y.png"></picture>\n' +
      `<p><a href="/library/files/manual.pdf" download>manual</a> <a data-type="attachment" href='/etc/passwd'>clamped</a> <a href="other.html">next</a></p>\n` +
      '<style>p { color: red }</style>\n' +
      '<table><tr><td>a</td><td>b</td></tr></table>\n',
    'img/source/attachment URLs resolved, quoting/case/entities kept, ordinary link left alone',
  );

  const page = byId(docs, 'b1:library/deep/nested/page.htm');
  const raw = await readFile(join(corpus, 'library/deep/nested/page.htm'), 'utf8');
  t.ok(raw.includes('\r\n'), 'fixture really has CRLF');
  t.equal(
    page.contentHtml,
    '\r\n<p>First line\r\n   continues</p>\r\n' +
      '<p><img src="/library/deep/nested/img/a.png" srcset="/library/deep/nested/img/a.png 1x,\r\n  /library/deep/nested/img/b.png 2x"></p>\r\n',
    'CRLF kept, also inside a rewritten srcset',
  );

  t.equal(
    byId(docs, 'b1:a b.html').contentHtml,
    '<p>fragment only &lt;p&gt;</p>\n',
    'page without <body> tag: its content as written',
  );
  t.equal(byId(docs, 'b1:zeta.html').contentHtml, '', 'empty body');
});

t.test('contentStr', async (t) => {
  const docs = await scan(corpus);
  t.equal(byId(docs, 'b1:index.html').contentStr, 'Ignored heading\nSee the OS page and .', 'script skipped');
  t.equal(
    byId(docs, 'b1:library/os.html').contentStr,
    'Operating System\u00a0Notes\nFigure: and\nmanual clamped next\na b',
    'blocks on their own lines, style skipped, cells space-separated',
  );
  t.equal(byId(docs, 'b1:library/deep/nested/page.htm').contentStr, 'First line continues');
  t.equal(byId(docs, 'b1:a b.html').contentStr, 'fragment only <p>', 'entities decoded');
  t.equal(byId(docs, 'b1:zeta.html').contentStr, null, 'empty text is null');
});

t.test('resolveCorpusUrl', async (t) => {
  const cases: [string, string, string][] = [
    ['../_images/x.png', 'library/os.html', '/_images/x.png'],
    ['img/a.png', 'a/b/c.html', '/a/b/img/a.png'],
    ['./img/a.png', 'a/b/c.html', '/a/b/img/a.png'],
    ['img/a.png', 'top.html', '/img/a.png'],
    ['../../../../x.png', 'a/b/c.html', '/x.png'],
    ['..', 'a/b/c.html', '/a/'],
    ['%2e%2e/%2E%2E/%2e%2e/x.png', 'a/b.html', '/x.png'],
    ['img/a.png?v=1&w=2#frag', 'a/c.html', '/a/img/a.png?v=1&w=2#frag'],
    ['img/../q.png?x=../y', 'a/c.html', '/a/q.png?x=../y'],
    ['dir/', 'a/c.html', '/a/dir/'],
    ['?v=1', 'a/c.html', '/a/c.html?v=1'],
    ['  img/a.png ', 'a/c.html', '  /a/img/a.png '],
    ['img/a:b.png', 'a/c.html', '/a/img/a:b.png'],
  ];
  for (const [url, page, want] of cases) t.equal(resolveCorpusUrl(url, page), want, `${url} in ${page}`);

  for (const url of [
    '/abs/x.png',
    '//cdn.example.com/x.png',
    '#top',
    'https://e.com/x.png',
    'data:image/png;base64,AAA',
    'mailto:a@b.c',
    '',
  ]) {
    t.equal(resolveCorpusUrl(url, 'a/b/c.html'), url, `${JSON.stringify(url)} unchanged`);
  }
});

t.test('resolveCorpusUrl reads \\ and encoded dots as a browser does (decisions.md D3.7)', async (t) => {
  const cases: [string, string, string, string][] = [
    ['img\\a.png', 'a/b/c.html', '/a/b/img/a.png', 'a backslash separates like a slash'],
    ['..\\..\\..\\..\\x.png', 'a/b/c.html', '/x.png', 'backslash .. clamped at the root'],
    ['.\\img\\.\\a.png', 'a/c.html', '/a/img/a.png', 'backslash . segments dropped'],
    ['img\\', 'a/c.html', '/a/img/', 'a trailing backslash names a directory'],
    ['.%2E/%2e./.%2e/x.png', 'a/b/c.html', '/x.png', 'every mixed spelling of an encoded .. clamped'],
    ['%2e/img/%2E/a.png', 'a/c.html', '/a/img/a.png', 'encoded . segments dropped'],
    [
      'a/%2e%2e\\%2E%2E\\..\\x.png?v=..\\1#..\\f',
      'p/q.html',
      '/x.png?v=..\\1#..\\f',
      'query and fragment kept as written',
    ],
    ['.\t./x.png', 'a/b/c.html', '/a/x.png', 'a tab inside .. is ignored, as URL parsers strip it'],
    ['a%2eb/..b/x.png', 'c.html', '/a%2eb/..b/x.png', 'dots inside names are not segments'],
    ['\\x.png', 'a/b.html', '/x.png', 'a leading backslash is root-relative'],
    ['/a\\..\\..\\x.png', 'p/q.html', '/x.png', 'a root-relative path with backslashes and .. resolved'],
    ['/%2e%2e/x.png?a\\b', 'p/q.html', '/x.png?a\\b', 'a root-relative path with encoded .. clamped'],
    ['\\\\cdn.example\\x.png', 'a/b.html', '//cdn.example/x.png', 'a backslash host becomes protocol-relative'],
    ['/\\cdn.example\\x.png?q\\', 'a/b.html', '//cdn.example/x.png?q\\', 'so does a slash-backslash host'],
  ];
  for (const [url, page, want, why] of cases)
    t.equal(resolveCorpusUrl(url, page), want, `${JSON.stringify(url)} in ${page}: ${why}`);
  for (const url of ['/abs//x.png', '/a..b/x.png', '//cdn.example/a/../x.png']) {
    t.equal(resolveCorpusUrl(url, 'a/b.html'), url, `${JSON.stringify(url)} unchanged: no backslash, no dot segment`);
  }

  const page = await scannedPage(
    '<body><img src="..\\..\\..\\x.png" srcset="img\\..\\..\\..\\a.png 1x, %2E%2E/%2e%2e/b.png 2x"><a href="&#46;&#46;&#92;f.pdf" download>f</a></body>',
    'd/e/p.html',
  );
  t.equal(
    page.contentHtml,
    '<img src="/x.png" srcset="/a.png 1x, /b.png 2x"><a href="/d/f.pdf" download>f</a>',
    'no backslash and no .. survive in a page’s media URLs',
  );
});

t.test('edge cases: symlinks, invalid UTF-8, media elements, character references', async (t) => {
  const dir = t.testdir({
    'real.html': '<title>Real</title><p>real</p>',
    sub: { 'inner.html': '<p>inner</p>' },
    'bad.html': Buffer.from([0x3c, 0x70, 0x3e, 0x61, 0xff, 0xfe, 0x62, 0x3c, 0x2f, 0x70, 0x3e]),
  });
  await symlink(join(dir, 'real.html'), join(dir, 'link.html'));
  await symlink(join(dir, 'sub'), join(dir, 'linkdir'));
  const when = new Date('2024-03-01T10:00:00.000Z');
  await utimes(join(dir, 'real.html'), when, when);

  const docs = await scan(dir, 'bk');
  t.same(
    docs.map((d) => d.id),
    ['bk:bad.html', 'bk:real.html', 'bk:sub', 'bk:sub/inner.html'],
    'symlinks not followed',
  );
  t.equal(byId(docs, 'bk:bad.html').contentHtml, '<p>a\ufffd\ufffdb</p>', 'invalid UTF-8 replaced, no crash');
  t.equal(byId(docs, 'bk:real.html').createdAt, when.toISOString(), 'timestamps are the mtime');

  const media =
    '<video src="v.mp4" poster="p.jpg"></video><audio src="a.ogg"><track src="t.vtt"></audio>' +
    '<embed src="e.swf"><object data="o.pdf"></object><img src="x.png?a=1&amp;b=2">' +
    '<a href="f.zip">plain</a><img src="x.png" src="ignored.png">';
  const page = await scannedPage(`<body>${media}</body>`, 'd/p.html');
  t.equal(
    page.contentHtml,
    '<video src="/d/v.mp4" poster="/d/p.jpg"></video><audio src="/d/a.ogg"><track src="/d/t.vtt"></audio>' +
      '<embed src="/d/e.swf"><object data="/d/o.pdf"></object><img src="/d/x.png?a=1&amp;b=2">' +
      '<a href="f.zip">plain</a><img src="/d/x.png" src="ignored.png">',
  );
  t.equal(rewriteCorpusUrls(media, 'd/p.html').count, 8);
});

t.test('media URLs go through the export rewriter: srcset, entities, escaping, raw text', async (t) => {
  // The page's record as scanned, and how many values the scanner's rewrite of that body changed.
  const rewrite = async (body: string, pagePath = 'd/p.html') => ({
    contentHtml: (await scannedPage(`<body>${body}</body>`, pagePath)).contentHtml,
    rewrittenUrls: rewriteCorpusUrls(body, pagePath).count,
  });

  let page = await rewrite(
    '<img srcset="a.png?x=1&amp;y=2 1x, &#46;&#46;/b.png 2x,data:image/png;base64,AA 3x, c.png (w, h) 4x">',
  );
  t.equal(
    page.contentHtml,
    '<img srcset="/d/a.png?x=1&amp;y=2 1x, /b.png 2x,data:image/png;base64,AA 3x, /d/c.png (w, h) 4x">',
    'each srcset candidate resolved after decoding; data: commas and descriptor parentheses kept',
  );
  t.equal(page.rewrittenUrls, 1, 'one attribute value changed');

  page = await rewrite(`<img src=&#46;/a&#32;b.png><img src='it&#39;s.png'><img src="&#104;ttps://x.example/a.png">`);
  t.equal(
    page.contentHtml,
    `<img src=/d/a&#32;b.png><img src='/d/it&#39;s.png'><img src="&#104;ttps://x.example/a.png">`,
    'character references decoded before resolving and re-encoded for the quoting; an encoded scheme stays absolute',
  );
  t.equal(page.rewrittenUrls, 2);

  page = await rewrite(`<img src="a.png"><img src='a.png'><img src=a.png>`, `R&D "x" it's/p.html`);
  t.equal(
    page.contentHtml,
    `<img src="/R&amp;D &quot;x&quot; it's/a.png"><img src='/R&amp;D "x" it&#39;s/a.png'>` +
      '<img src=/R&amp;D&#32;&quot;x&quot;&#32;it&#39;s/a.png>',
    'folder names are escaped for the attribute they land in',
  );

  page = await rewrite(
    '<!-- <img src=a.png> --><script>"<img src=a.png>"</script><textarea><img src=a.png></textarea>&lt;img src=a.png&gt;' +
      '<svg><a href="f.pdf" download></a><video src="v.mp4"></video></svg><svg><foreignObject><img src="f.png"></foreignObject></svg>',
  );
  t.equal(
    page.contentHtml,
    '<!-- <img src=a.png> --><script>"<img src=a.png>"</script><textarea><img src=a.png></textarea>&lt;img src=a.png&gt;' +
      '<svg><a href="f.pdf" download></a><video src="v.mp4"></video></svg><svg><foreignObject><img src="/d/f.png"></foreignObject></svg>',
    'comments, raw text, escaped markup and foreign (SVG) elements untouched, as in the export (D3.4)',
  );
  t.equal(page.rewrittenUrls, 1);

  page = await rewrite('<image src=a.png><a href=f.pdf download=f.pdf>f</a><a href=g.pdf>g</a>');
  t.equal(
    page.contentHtml,
    '<image src=/d/a.png><a href=/d/f.pdf download=f.pdf>f</a><a href=g.pdf>g</a>',
    '<image> is an img; only attachment links',
  );
  t.equal(page.rewrittenUrls, 2);
});
