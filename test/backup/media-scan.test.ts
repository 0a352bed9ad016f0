/**
 * The backup client finds exactly the media URLs the server rewrote (src/backup/media-scan.ts):
 * scanning an export's contentHtml with D3's shared table (media-attributes.ts) gives the
 * values the rewriter produced under the prefix, srcset candidates one by one and in order, and
 * nothing else: not links that are not attachments, not foreign content, not text. Checked on the
 * rewriter's own cases and on generated documents, against the rewriter itself. Then the scanner
 * over whole export bodies, JSON and NDJSON: cover URLs and contentHtml, per document, in order.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { documentMediaUrls, mediaScanner } from '../../src/backup/media-scan.js';
import { MediaUrls } from '../../src/backup/media-path.js';
import { HtmlMediaRewriter, rewriteHtml, urlTransformRules } from '../../src/export/rewrite/rewriter/html-rewriter.js';
import { rewriteMediaUrl } from '../../src/export/rewrite/rewriter/media-url.js';
import { generateDocuments } from '../../src/generate/generator.js';
import { sourceUrl } from '../helpers/paths.js';

const P = '/media/';
const media = new MediaUrls(P, 'http://127.0.0.1:3000');

/** The URLs the rewriter looks at in `html` (D3.3's values, srcset candidates one by one), rewritten, kept when under the prefix. */
function rewrittenByServer(html: string): string[] {
  const seen: string[] = [];
  new HtmlMediaRewriter(
    urlTransformRules((u) => {
      seen.push(u);
      return u;
    }),
  ).editsOf(html);
  return seen.map((u) => rewriteMediaUrl(u, P).trim()).filter((u) => u.startsWith(P));
}

function scanned(html: string): string[] {
  const out: string[] = [];
  documentMediaUrls({ contentHtml: html }, media, out);
  return out;
}

t.test("the rewriter's cases: the scan of the rewritten HTML is what the rewriter put under the prefix", async (t) => {
  const cases = JSON.parse(
    readFileSync(sourceUrl(import.meta.url, '../export/rewrite/fixtures/rewriter-cases.json'), 'utf8'),
  ) as { name: string; input: string; expected: string }[];
  let urls = 0;
  for (const c of cases) {
    const want = rewrittenByServer(c.input);
    t.same(scanned(c.expected), want, c.name);
    urls += want.length;
  }
  t.ok(urls > 100, `${urls} media URLs in ${cases.length} cases`);
});

t.test('generated documents: the same URLs, in the same order, as the rewriter', async (t) => {
  let urls = 0;
  let documents = 0;
  for (const d of generateDocuments({ bookId: 'b', documents: 400, seed: 7, paragraphs: 2 })) {
    const html = d.contentHtml;
    if (html === null || html === undefined) continue;
    documents++;
    const want = rewrittenByServer(html);
    const got = scanned(rewriteHtml(html, P));
    if (JSON.stringify(got) !== JSON.stringify(want)) t.same(got, want, d.id);
    urls += got.length;
  }
  t.ok(urls > 300, `${urls} media URLs in ${documents} documents, each as the rewriter made it`);
});

t.test('what is not media is not collected', async (t) => {
  t.same(
    scanned('<a href="/media/doc">a link</a><a download href="/media/f.pdf">f</a>'),
    ['/media/f.pdf'],
    'an a only as an attachment',
  );
  t.same(scanned('<a data-type="attachment" href="/media/g.zip">g</a>'), ['/media/g.zip']);
  t.same(
    scanned('<svg><video src="/media/v.mp4"></video></svg><svg><img src="/media/i.png"></svg>'),
    ['/media/i.png'],
    'foreign content is not HTML media; an img leaves it',
  );
  t.same(
    scanned(
      '<!-- <img src="/media/c.png"> --><script>"<img src=/media/s.png>"</script><p>&lt;img src="/media/t.png"&gt;</p>',
    ),
    [],
  );
  t.same(
    scanned('<img src="https://example.com/media/x.png" srcset="data:image/png;base64,AAA 1x, /media/y.png 2x">'),
    ['/media/y.png'],
  );
  t.same(scanned('<img src="&#x2F;media/e.png">'), ['/media/e.png'], 'attribute values decoded');
});

t.test('whole bodies, JSON and NDJSON: cover URLs and HTML, document by document', async (t) => {
  const docs = [
    { id: 'a', cover: { url: '/media/covers/a.jpg', position: 'center' }, contentHtml: '<img src="/media/a.png">' },
    { id: 'b', cover: { url: 'https://images.example.com/b.jpg', position: null }, contentHtml: null },
    { id: 'c', cover: null, contentHtml: '<p>no media</p><video poster="/media/p.jpg" src="/media/v.mp4"></video>' },
  ];
  const bodies = {
    json: JSON.stringify({ success: true, book: { id: 'b' }, documents: docs, meta: { count: 3 } }),
    ndjson: [
      JSON.stringify({ success: true, book: { id: 'b' } }),
      ...docs.map((d) => JSON.stringify(d)),
      JSON.stringify({ meta: { count: 3 } }),
      '',
    ].join('\n'),
  };
  for (const format of ['json', 'ndjson'] as const) {
    const found: string[] = [];
    const sink = mediaScanner(format, media, (u) => {
      found.push(u);
    });
    const bytes = Buffer.from(bodies[format]);
    // In pieces that cut documents and tags anywhere.
    for (let i = 0; i < bytes.length; i += 7) sink.write(bytes.subarray(i, i + 7));
    await new Promise((resolve, reject) => sink.end(resolve).once('error', reject));
    t.same(found, ['/media/covers/a.jpg', '/media/a.png', '/media/p.jpg', '/media/v.mp4'], format);
  }
});
