/**
 * The HTML stage (src/export/rewrite/html-stage.ts) and the splice of rewritten attribute values into
 * contentHtml's JSON text (document-encoder.ts rewriteJsonText): byte for byte what
 * decoding, rewriting with the rewriter of record and re-escaping the whole text gives, for any
 * HTML; the same bytes whichever path rewrites a batch; large documents never sent to a worker.
 */
import fc from 'fast-check';
import { arbitraryHtml as html } from '../../helpers/html-arbitrary.js';
import t from 'tap';
import { rewriteJsonText } from '../../helpers/plans.js';
import type { ContentHtmlJson } from '../../../src/export/encode/document-encoder.js';
import { rewriteBatchHtml } from '../../../src/export/rewrite/html-stage.js';
import { rewriteHtml } from '../../../src/export/rewrite/html-rewriter.js';
import { LARGE_DOCUMENT_BYTES } from '../../../src/export/rewrite/large-garbage.js';
import { DOC, type DocumentRow } from '../../../src/export/snapshot/query.js';
import { RewritePool } from '../../../src/export/rewrite/rewrite-pool.js';

const P = '/media/';
const json = (s: string) => Buffer.from(JSON.stringify(s));

t.test('the splice into the JSON text equals re-escaping the rewriter\'s output whole (any HTML)', async (t) => {
  fc.assert(
    fc.property(html, (h) => {
      const out = rewriteJsonText(json(h), P);
      return out.toString('utf8') === JSON.stringify(rewriteHtml(h, P));
    }),
    { numRuns: 3000 },
  );
  t.pass('held for 3,000 generated documents');
});

t.test('unchanged HTML comes back as the very same Buffer', async (t) => {
  const j = json('<img src="data:image/png;base64,AAAA"><img src="https://cdn/x.png">');
  t.equal(rewriteJsonText(j, P), j);
});

/** contentHtml's JSON text as one Buffer, from the stage's Buffer or parts; a Buffer passed through stays that Buffer. */
const joined = (h: ContentHtmlJson): Buffer => (Array.isArray(h) ? Buffer.concat(h) : (h as Buffer));

function row(contentHtml: string | null): DocumentRow {
  const r = new Array(19).fill(null) as unknown as DocumentRow;
  r[DOC.contentHtml] = contentHtml === null ? null : json(contentHtml);
  return r;
}

t.test('one path whatever runs it: the same bytes inline and with a pool; large documents stay inline', async (t) => {
  const pool = new RewritePool(1);
  t.teardown(() => pool.close());
  const rows = [
    row(null),
    row(''),
    row('<p>no media</p>'),
    row('<img src="a.png">'),
    row('<p>' + 'x'.repeat(70_000) + '<img src="b.png"></p>'),
  ];
  const inline = (rewriteBatchHtml(rows, { prefix: P, offloadBytes: 0 }) as ContentHtmlJson[]).map(joined);
  const pooled = (await rewriteBatchHtml(rows, { prefix: P, pool, offloadBytes: 0 })).map(joined);
  t.same(pooled.map(String), inline.map(String), 'same bytes from the worker');
  t.equal(inline[0]!.toString(), 'null', 'NULL is null (D2.1)');
  t.equal(inline[1]!.toString(), 'null', "'' is null (D2.1)");
  t.equal(inline[2], rows[2]![DOC.contentHtml], 'passed through as stored');
  t.match(inline[3]!.toString(), /\/media\/a\.png/);

  await pool.close();
  const large = [row('<img src="a.png">' + 'y'.repeat(LARGE_DOCUMENT_BYTES))];
  const out = rewriteBatchHtml(large, { prefix: P, pool, offloadBytes: 0 });
  t.ok(Array.isArray(out), 'a large document is rewritten on the event loop, not sent to the (closed) pool');
  t.match(joined((out as ContentHtmlJson[])[0]!).subarray(0, 40).toString(), /\/media\/a\.png/);
  const small = rewriteBatchHtml([row('<img src="a.png">')], { prefix: P, pool, offloadBytes: 0 });
  await t.rejects(small as Promise<Buffer[]>, 'a small flagged batch does go to the pool, which is closed');
});
