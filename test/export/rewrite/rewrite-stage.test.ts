/**
 * The rewrite stage (src/export/rewrite/rewrite-stage.ts) and the plans it splices contentHtml's
 * JSON text with (plans/html-plan.ts): byte for byte what decoding, rewriting with the rewriter of
 * record and re-escaping the whole text gives, for any HTML, whether the text is planned whole or
 * in slices cut anywhere; the same bytes whichever path rewrites a batch; a large document alone
 * on a worker; on the event loop every document in slices, with no long step (D8.8).
 */
import fc from 'fast-check';
import t from 'tap';
import type { BatchRewrites, ContentHtmlJson } from '../../../src/export/rewrite/rewrites.js';
import { DOC, type DocumentRow } from '../../../src/export/snapshot/rows.js';
import { EventLoopSlices } from '../../../src/event-loop.js';
import { planContentHtml, planContentHtmlSliced } from '../../../src/export/rewrite/plans/html-plan.js';
import { jsonPrefixBytes, planFromEdits, planKey } from '../../../src/export/rewrite/plans/rewrite-plan.js';
import {
  LARGE_DOCUMENT_BYTES,
  OFFLOAD_DOCUMENTS,
  rewriteRows,
  type RewriteStageOptions,
} from '../../../src/export/rewrite/rewrite-stage.js';
import { rewriteHtml } from '../../../src/export/rewrite/rewriter/html-rewriter.js';
import { leanRewritePool } from '../../helpers/lean-workers.js';
import { arbitraryHtml as html } from '../../helpers/html-arbitrary.js';
import { rewriteJsonText, stagedRow } from '../../helpers/plans.js';

const RewritePool = await leanRewritePool(t);
type RewritePool = InstanceType<typeof RewritePool>;

const P = '/media/';
const json = (s: string) => Buffer.from(JSON.stringify(s));

t.test("the splice into the JSON text equals re-escaping the rewriter's output whole (any HTML)", async (t) => {
  fc.assert(
    fc.property(html, (h) => rewriteJsonText(json(h), P).toString('utf8') === JSON.stringify(rewriteHtml(h, P))),
    { numRuns: 3000 },
  );
  t.pass('held for 3,000 generated documents');
});

t.test(
  'a plan made in slices cut anywhere (escapes, UTF-8 sequences, surrogate pairs) is the plan made whole, no promise when none paused',
  async (t) => {
    const tricky = fc.constantFrom(
      'é',
      '€',
      '😀',
      '\n',
      '"',
      '\\',
      '\u0001',
      '\u2028',
      '<img src="a b.png">',
      "<img src='c\"d'>",
      '&amp;',
    );
    const text = fc.array(fc.oneof(html, tricky), { maxLength: 6 }).map((parts) => parts.join(''));
    await fc.assert(
      fc.asyncProperty(text, fc.integer({ min: 1, max: 40 }), async (h, pieceBytes) => {
        const j = json(h);
        const sliced = await planContentHtmlSliced(j, P, async () => {}, pieceBytes);
        const unpaused = planContentHtmlSliced(j, P, () => undefined, pieceBytes);
        return (
          sliced.equals(planContentHtml(j, P, Infinity)) &&
          planContentHtml(j, P, pieceBytes).equals(sliced) &&
          Buffer.isBuffer(unpaused) &&
          unpaused.equals(sliced)
        );
      }),
      { numRuns: 2000 },
    );
    t.pass('held for 2,000 generated documents and slice sizes');
  },
);

t.test('unchanged HTML comes back as the very same Buffer', async (t) => {
  const j = json('<img src="data:image/png;base64,AAAA"><img src="https://cdn/x.png">');
  t.equal(rewriteJsonText(j, P), j);
});

/** contentHtml's JSON text as one Buffer, from a stored text or the pieces of a splice. */
const joined = (h: ContentHtmlJson): Buffer | null => (h === null || Buffer.isBuffer(h) ? h : Buffer.concat([...h]));

function row(contentHtml: string | null, coverUrl: string | null = null): DocumentRow {
  const r: DocumentRow = [
    Buffer.from('{"id":"d","cover":'),
    null,
    Buffer.from('"center"'),
    Buffer.from(',"contentHtml":'),
    null,
    null,
  ];
  r[DOC.contentHtml] = contentHtml === null ? null : json(contentHtml);
  r[DOC.coverUrl] = coverUrl === null ? null : Buffer.from(coverUrl);
  return r;
}

function options(pool: RewritePool | null, over: Partial<RewriteStageOptions> = {}): RewriteStageOptions {
  return { prefix: P, pool, offloadBytes: 0, plans: null, pause: async () => {}, ...over };
}

/** The bytes a batch's rewrites stand for: what `bytes` promises. */
function sizeOf(rows: DocumentRow[], out: BatchRewrites): number {
  let n = 0;
  rows.forEach((r, i) => {
    for (const [k, col] of r.entries()) if (k !== DOC.contentHtml && k !== DOC.coverUrl) n += col?.length ?? 0;
    n += out.coverUrls[i]?.length ?? 0;
    n += joined(out.contentHtml[i]!)?.length ?? 0;
  });
  return n;
}

/** A row as the cursor reads it with a stored plan: bytea's hex text of the key, then the plan. */
function withStoredPlan(r: DocumentRow, keyedText: Buffer, plan: Buffer): DocumentRow {
  const key = planKey(keyedText, P, plan);
  r[DOC.plan] = Buffer.from(`\\x${Buffer.concat([key, plan]).toString('hex')}`);
  return r;
}

t.test(
  'a stored plan is checked before the pre-check; one that does not match leaves the pre-check to decide',
  async (t) => {
    const media = '<img src="a.png">';
    const plain = '<p>x</p>';
    // A plan no rewriter would make (the pre-check passes the text): applied, so its key was checked first.
    const forged = planFromEdits(json(plain), [4, 5], [Buffer.from('y')], jsonPrefixBytes(P));
    const rows = [
      withStoredPlan(row(media), json(media), planContentHtml(json(media), P)),
      withStoredPlan(row(plain), json(plain), forged),
      withStoredPlan(
        row(plain),
        json('<p>old</p><img src="b.png">'),
        planContentHtml(json('<p>old</p><img src="b.png">'), P),
      ),
      withStoredPlan(row(media), json('<img src="old.png">'), planContentHtml(json('<img src="old.png">'), P)),
    ];
    const counts = { reused: 0, computed: 0 };
    const out = await rewriteRows(rows, options(null, { plans: { writer: null, counts } }));
    const texts = out.contentHtml.map((h) => joined(h)!.toString());
    t.equal(texts[0], JSON.stringify(rewriteHtml(media, P)), 'a matching plan spliced');
    t.equal(texts[1], JSON.stringify('<p>y</p>'), 'a matching plan applied without the pre-check');
    t.equal(
      out.contentHtml[2],
      rows[2]![DOC.contentHtml],
      'a stale plan on a text the pre-check passes: the stored text, untouched',
    );
    t.equal(texts[3], JSON.stringify(rewriteHtml(media, P)), 'a stale plan on a flagged text: planned again');
    t.same(counts, { reused: 2, computed: 1 }, 'only the flagged text without a matching plan is computed');
    t.equal(out.bytes, sizeOf(rows, out), 'bytes counts the rows as they will be written');
  },
);

// One worker for both tests that use one (it takes about a second of CPU to load under the tests'
// TypeScript loader); the second closes it to show the worker did its work.
const pool = new RewritePool(1);
t.teardown(() => pool.close());

t.test('one path whatever runs it: the same bytes inline and on a worker, as the encoder tests expect', async (t) => {
  const rows = [
    row(null),
    row(''),
    row('<p>no media</p>', '/covers/1.png'),
    row('<img src="a.png">', 'https://cdn/c.png'),
    row('<p>' + 'x'.repeat(70_000) + '<img src="b.png"></p>'),
  ];
  const inline = await rewriteRows(rows, options(null));
  const pooled = await rewriteRows(rows, options(pool));
  t.same(
    pooled.contentHtml.map(joined).map(String),
    inline.contentHtml.map(joined).map(String),
    'same bytes from the worker',
  );
  t.same(
    inline.contentHtml.map(joined),
    rows.map((r) => joined(stagedRow(r, P).html)),
    'what the encoder tests and benchmark encode',
  );
  t.same(
    inline.coverUrls,
    rows.map((r) => stagedRow(r, P).coverUrl),
    'cover URLs rewritten (D3.6)',
  );
  t.equal(inline.contentHtml[2], rows[2]![DOC.contentHtml], 'passed through as stored');
  t.equal(inline.bytes, sizeOf(rows, inline), 'bytes counts the rows as they will be written');
  t.equal(pooled.bytes, inline.bytes);
});

t.test('many small documents go to a worker below offloadBytes: each costs a parser of its own', async (t) => {
  // A closed pool fails whatever is given to it: which batch went there shows.
  const closed = new RewritePool(1);
  await closed.close();
  const small = (n: number) => Array.from({ length: n }, (_, i) => row(`<p>${i}</p><img src="img/${i}.png">`));
  const under = await rewriteRows(small(OFFLOAD_DOCUMENTS - 1), options(closed, { offloadBytes: 1 << 20 }));
  t.match(joined(under.contentHtml[0]!)!.toString(), /\/media\/img\/0\.png/, 'a few: planned on the event loop');
  await t.rejects(
    rewriteRows(small(OFFLOAD_DOCUMENTS), options(closed, { offloadBytes: 1 << 20 })),
    `${OFFLOAD_DOCUMENTS} of them, far under offloadBytes: sent to the pool`,
  );
});

t.test(
  'a large document: alone on a worker when there are workers, in slices on the event loop otherwise',
  async (t) => {
    const big = row('<img src="a.png">' + '<p>y</p>'.repeat(LARGE_DOCUMENT_BYTES / 8) + '<img src=z.png>');
    let pauses = 0;
    const inline = await rewriteRows([big], options(null, { pause: async () => void pauses++ }));
    t.ok(pauses >= 4, `the event loop's planning paused between slices (${pauses} pauses)`);
    const text = joined(inline.contentHtml[0]!)!.toString();
    t.match(text.slice(0, 40), /\/media\/a\.png/);
    t.match(text.slice(-40), /\/media\/z\.png/);
    const pooled = await rewriteRows([big], options(pool));
    t.ok(joined(pooled.contentHtml[0]!)!.equals(joined(inline.contentHtml[0]!)!), 'the worker planned the same bytes');
    await pool.close();
    await t.rejects(
      rewriteRows([big], options(pool)),
      'and it was the worker that planned it: a closed pool fails the batch',
    );
  },
);

/**
 * Rewrites `rows` on the event loop, as an export without workers does, with slices of 0 ms, so
 * every pause the planning and the splicing offer yields: the turns a setImmediate probe got meanwhile.
 * Counting turns, not timing steps, keeps the check the same on a loaded machine; the time a step
 * takes is measured beside an export by the hostile-tenant test and `bench/hardening.ts` (D8.8).
 */
async function turnsWhile(rows: DocumentRow[]): Promise<{ out: BatchRewrites; turns: number }> {
  const slices = new EventLoopSlices(0);
  let turns = 0;
  const probe = () => {
    turns++;
    next = setImmediate(probe);
  };
  let next = setImmediate(probe);
  try {
    const out = await rewriteRows(rows, options(null, { pause: () => slices.pause() }));
    return { out, turns };
  } finally {
    clearImmediate(next);
  }
}

t.test(
  'documents under the large size are planned in slices too: the event loop gets turns within each (D8.8)',
  async (t) => {
    // Four documents just under LARGE_DOCUMENT_BYTES of nothing but media tags, about 380,000 URLs:
    // planned each in one step, every one held the event loop for 300 ms and more, and the loop got
    // a turn only between documents.
    const tag = '<img src=a>';
    const text = tag.repeat(Math.floor((LARGE_DOCUMENT_BYTES - 16) / tag.length));
    const rows = Array.from({ length: 4 }, () => row(text));
    const { out, turns } = await turnsWhile(rows);
    // Each document offers a pause per 64 KiB piece of its JSON text planned and per 4,096 URLs
    // spliced; either step done whole loses that half of the turns. One each is slack at the edges.
    const pieces = Math.ceil((rows[0]![DOC.contentHtml]!.length - 2) / (64 * 1024));
    const splices = Math.floor(text.length / tag.length / 4096);
    const atLeast = rows.length * (pieces + splices - 1);
    t.ok(turns >= atLeast, `the event loop got ${turns} turns while 4 documents were planned (at least ${atLeast})`);
    const rewritten = joined(out.contentHtml[3]!)!.toString();
    t.equal(rewritten, JSON.stringify(text.replaceAll('src=a', 'src=/media/a')), 'every URL rewritten');
    t.equal(out.bytes, sizeOf(rows, out), 'bytes counts the rows as they will be written');
  },
);
