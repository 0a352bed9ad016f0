/**
 * The streaming page reader (src/import/html-page.ts) against the tree-based one it replaced
 * (test/helpers/tree-page.ts): the same name, contentHtml and contentStr for the fixtures, for
 * random well-formed pages, and for every page of the PostgreSQL manual when it is installed
 * (Debian's postgresql-doc-15). The cases where they differ are listed, each with why the tree's
 * answer was wrong.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import t from 'tap';
import { pageFromHtml } from '../../src/import/html-page.js';
import { treePageFromHtml } from '../helpers/tree-page.js';
import { sourceUrl } from '../helpers/paths.js';

const FIXTURES = fileURLToPath(sourceUrl(import.meta.url, './fixtures/corpus'));
const MANUAL = '/usr/share/doc/postgresql-doc-15/html';

const read = (html: string, page = 'd/p.html') => pageFromHtml(html, page, 'fallback');
const tree = (html: string, page = 'd/p.html') => treePageFromHtml(html, page, 'fallback');

/** Every HTML page below `dir`, as import-html decodes it. */
function* pages(dir: string): Generator<[string, string]> {
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !/\.html?$/i.test(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    yield [path.relative(dir, file).split(path.sep).join('/'), new TextDecoder('utf-8').decode(readFileSync(file))];
  }
}

t.test('the fixtures read as the tree read them', async (t) => {
  let n = 0;
  for (const [rel, html] of pages(FIXTURES)) {
    t.same(read(html, rel), tree(html, rel), rel);
    n++;
  }
  t.equal(n, 5);
});

t.test(
  'every page of the PostgreSQL manual reads as the tree read it',
  { skip: !existsSync(MANUAL) && `${MANUAL} is missing (Debian package postgresql-doc-15)` },
  async (t) => {
    let n = 0;
    let differing = 0;
    for (const [rel, html] of pages(MANUAL)) {
      n++;
      const got = read(html, rel);
      const want = tree(html, rel);
      if (got.name !== want.name || got.contentHtml !== want.contentHtml || got.contentStr !== want.contentStr) {
        differing++;
        t.same(got, want, rel);
      }
    }
    t.ok(n > 1000, `${n} pages`);
    t.equal(differing, 0, `${n} pages, none differs`);
  },
);

// Random pages whose elements nest as HTML allows, so the tree builder keeps them as written: the
// kind of page documentation generators write.
const word = fc.constantFrom(
  'alpha',
  'beta gamma',
  ' ',
  '\n  ',
  'a &amp; b',
  '&lt;tag&gt;',
  '&copy; 2024',
  'x&nbsp;y',
  'café',
  '日本語',
  '“quoted”',
  '&#x41;&#66;',
);
const { block } = fc.letrec<{ inline: string; block: string; flow: string }>((tie) => ({
  inline: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    word,
    word,
    fc.constantFrom(
      '<br>',
      '<img src="../img/a.png" alt="a">',
      '<!-- note -->',
      '<code>x &lt; y</code>',
      '<script>if (a < b) {}</script>',
    ),
    fc
      .tuple(
        fc.constantFrom('span', 'em', 'strong', 'code', 'a href="x.html"', 'a href="f.pdf" download'),
        fc.array(tie('inline'), { maxLength: 3 }),
      )
      .map(([tag, kids]) => `<${tag}>${kids.join('')}</${tag.split(' ')[0]}>`),
  ),
  flow: fc.array(fc.oneof(tie('inline'), tie('block')), { maxLength: 4 }).map((xs) => xs.join('')),
  block: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.array(tie('inline'), { maxLength: 4 }).map((xs) => `<p>${xs.join('')}</p>`),
    fc
      .tuple(fc.constantFrom('div', 'section', 'blockquote', 'nav', 'li-list', 'dl'), tie('flow'), tie('flow'))
      .map(([tag, a, b]) =>
        tag === 'li-list'
          ? `<ul><li>${a}</li><li>${b}</li></ul>`
          : tag === 'dl'
            ? `<dl><dt>${a}</dt><dd>${b}</dd></dl>`
            : `<${tag}>${a}${b}</${tag}>`,
      ),
    fc
      .tuple(fc.constantFrom('h1', 'h2', 'h3'), fc.array(tie('inline'), { maxLength: 3 }))
      .map(([h, xs]) => `<${h}>${xs.join('')}</${h}>`),
    fc
      .array(fc.array(tie('inline'), { maxLength: 2 }), { minLength: 1, maxLength: 3 })
      .map(
        (cells) =>
          `<table><tbody><tr>${cells.map((c, i) => `<${i === 0 ? 'th' : 'td'}>${c.join('')}</${i === 0 ? 'th' : 'td'}>`).join('')}</tr></tbody></table>`,
      ),
    fc.constantFrom(
      '<pre>\nline 1\n  line 2 &amp; more</pre>',
      '<hr>',
      '<style>p { color: red }</style>',
      '<noscript><p>enable scripts</p></noscript>',
      '<template><h1>not here</h1></template>',
      '<textarea>t &amp; <b>u</b></textarea>',
      '<svg viewBox="0 0 1 1"><title>diagram</title><text>label</text></svg>',
      '<math><mi>x</mi></math>',
      '<select><option>one</option><option>two</option></select>',
      '<figure><img src="f.png"><figcaption>caption</figcaption></figure>',
    ),
  ),
}));

const page = fc
  .record({
    doctype: fc.constantFrom(
      '',
      '<!DOCTYPE html>\n',
      '<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN" "x.dtd">',
    ),
    title: fc.constantFrom(null, '', 'Page &amp; title', '  Spaced\n title '),
    head: fc.constantFrom(
      '',
      '<meta charset="utf-8"><link rel="stylesheet" href="s.css">',
      '<script>var x = "<p>";</script><style>b{}</style>',
    ),
    bodyTag: fc.constantFrom('<body>', '<body class="doc">', '\n<body>\n', ''),
    blocks: fc.array(block, { maxLength: 6 }),
    end: fc.constantFrom('</body></html>', '</body>\n</html>\n', '\n</body>\n<!-- generated -->\n</html>', '</html>\n'),
  })
  .map(({ doctype, title, head, bodyTag, blocks, end }) => {
    const titleTag = title === null ? '' : `<title>${title}</title>`;
    const body = blocks.join('\n');
    // Without a <body> tag, content that starts with a head element would land in the head.
    const close = bodyTag === '' ? end.replace('</body>', '') : end;
    return `${doctype}<html><head>${titleTag}${head}</head>${bodyTag}${bodyTag === '' ? `<div>${body}</div>` : body}${close}`;
  });

t.test('random well-formed pages read as the tree read them', async (t) => {
  fc.assert(
    fc.property(page, (html) => {
      t.same(read(html), tree(html), html);
      return true;
    }),
    { numRuns: 400 },
  );
  t.pass('400 pages');
});

t.test('where the two differ, the tree was wrong', async (t) => {
  // [html, what differs, the new reading, why the tree's was wrong]
  const cases: [string, 'contentHtml' | 'contentStr' | 'name', string, string][] = [
    [
      '<title>T</title><meta charset=utf-8>',
      'contentHtml',
      '',
      'a page with nothing in its body: the tree gave the whole source, head included',
    ],
    [' \n ', 'contentHtml', '', 'a blank page: the same'],
    ['<head></head></body>', 'contentHtml', '', 'a stray </body> before any content: the same'],
    ['<body><div>x\n</html>', 'contentHtml', '<div>x\n', 'no </body>: the tree took </html> into the body'],
    [
      '<body>text<script>unclosed',
      'contentHtml',
      'text<script>unclosed',
      'a script left open at the end: the tree dropped its bytes',
    ],
    [
      '<body><svg><h1>exit</h1></svg>',
      'contentHtml',
      '<svg><h1>exit</h1></svg>',
      'no </body> and a stray end tag last: the tree dropped the tag, now kept as written',
    ],
  ];
  for (const [html, field, want, why] of cases) {
    t.equal(read(html)[field], want, why);
    t.not(tree(html)[field], want, `(the tree: ${JSON.stringify(tree(html)[field])})`);
  }
});

t.test('what a tree of the page would have made of it, without one', async (t) => {
  const cases: [string, Partial<ReturnType<typeof read>>, string][] = [
    [
      '<title></title><title>Second</title><h1>Head&amp;ing</h1>',
      { name: 'Head&ing' },
      'only the first <title> counts, an empty one gives way to the first <h1>',
    ],
    [
      '<svg><title>S</title></svg><p>z</p><title>T</title>',
      { name: 'T', contentStr: 'z\nT' },
      "an SVG <title> is not the page's; one in the body is text",
    ],
    [
      '<head><template><title>X</title></template></head><body>t</body>',
      { name: 'fallback', contentStr: 't' },
      "a template's content is not the document",
    ],
    [
      '<body><h1>A<span><h2>B</h2>C</span></h1><h1>Second</h1>',
      { name: 'ABC' },
      "a heading inside the <h1>'s span is part of it",
    ],
    ['<body><h1>A<h2>B</h2></h1>', { name: 'A' }, 'a heading right inside it closes the <h1>'],
    [
      '<body><table><tr><td>x</body>y</td></tr></table></body>z',
      { contentHtml: '<table><tr><td>x</body>y</td></tr></table>', contentStr: 'xy\nz' },
      '</body> inside a cell closes nothing',
    ],
    ['<body><a href="x">l</a><td>c</td></body>', { contentStr: 'lc' }, 'a cell outside a table is no element'],
    [
      '<body>a</>b<p>x<div',
      { contentHtml: 'a</>b<p>x<div', contentStr: 'ab\nx' },
      '</> and a tag cut off by the end are no text',
    ],
    [
      '<body>&notit; &amp &#x80; a\0b<textarea>c\0d</textarea>',
      { contentStr: '¬it; & € abc\ufffdd' },
      'references as in text, NUL dropped in data and replaced in RCDATA',
    ],
    ['<body><svg><text><![CDATA[a<b]]></text></svg>', { contentStr: 'a<b' }, 'CDATA in foreign content'],
    [
      '  \n hello<html><body>x</body>',
      { contentHtml: 'hello<html><body>x', contentStr: 'hellox' },
      'text before <html> opens the body',
    ],
    [
      '<frameset><frame src=a></frameset>',
      { contentHtml: '<frameset><frame src=a></frameset>', contentStr: null },
      'a frameset page has no body',
    ],
  ];
  for (const [html, want, why] of cases) {
    const got = read(html);
    t.match(got, want, why);
    t.match(tree(html), want, `the tree agrees: ${why}`);
  }
});
