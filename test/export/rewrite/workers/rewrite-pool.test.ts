/**
 * The rewrite workers (src/export/rewrite/workers/rewrite-pool.ts): the same bytes as the event loop's rewrite,
 * batches matched to their replies whatever the order they finish in, and a worker that dies
 * failing the batch it was on, replaced for the next ones. How the pool keeps such failures to one
 * export (decisions.md D8.6) is in rewrite-pool-failures.test.ts.
 */
import t from 'tap';
import { rewriteJsonText, rewrittenByPool } from '../../../helpers/plans.js';
import { jsonHtmlMayNeedRewrite } from '../../../../src/export/rewrite/rewriter/html-rewriter.js';
import { leanRewritePool } from '../../../helpers/lean-workers.js';

const RewritePool = await leanRewritePool(t);
type RewritePool = InstanceType<typeof RewritePool>;

const PREFIX = '/media/';
const json = (html: string) => Buffer.from(JSON.stringify(html));

const TEXTS = [
  '<p>x<img src="/a/b.png"></p>',
  '<p>unchanged <img src="https://cdn.example/x.png"></p>',
  '<a href="files/r.pdf" download>r</a> <a href="/page">p</a>',
  '<figure><img srcset="a.png 1x, /b.png 2x" src="é/ü.png"><figcaption>ünïcödé 😀</figcaption></figure>',
  `<div>${'<p>text &amp; more</p>'.repeat(2000)}<video src="v.mp4" poster="p.jpg"></video></div>`,
  '<img src=\'q.png\'><source src="s.webm"><track src="t.vtt">',
].map(json);

// The two tests of healthy workers share a pool of two: starting a worker costs more CPU than
// either test, and neither depends on the workers being fresh.
const twoWorkers = new RewritePool(2);
t.teardown(() => twoWorkers.close());

t.test('texts come back rewritten exactly as on the event loop, unchanged ones as the same Buffer', async (t) => {
  for (const text of TEXTS) t.ok(jsonHtmlMayNeedRewrite(text), 'fixture is flagged by the pre-check');
  const out = await rewrittenByPool(twoWorkers, TEXTS, PREFIX);
  t.equal(out.length, TEXTS.length);
  TEXTS.forEach((text, i) => {
    const expected = rewriteJsonText(text, PREFIX);
    t.same(out[i], expected, `text ${i}`);
    t.equal(out[i] === text, expected === text, `text ${i}: unchanged comes back as the input itself`);
  });
  t.equal(out[1], TEXTS[1], 'an absolute URL is left alone (D3.2): same Buffer');
  t.match(out[0]!.toString(), /src=\\"\/media\/a\/b.png\\"/);
  t.same(await rewrittenByPool(twoWorkers, [], PREFIX), [], 'an empty batch');
});

t.test('concurrent batches on two workers each get their own reply, in order', async (t) => {
  const batches = Array.from({ length: 40 }, (_, b) =>
    Array.from({ length: 1 + (b % 7) }, (_, i) =>
      json(`<p>${b}-${i}</p>${'<b>x</b>'.repeat((b * 31 + i) % 500)}<img src="i${b}-${i}.png">`),
    ),
  );
  const results = await Promise.all(
    batches.map((texts) => rewrittenByPool(twoWorkers, texts, `/m${batches.indexOf(texts)}/`)),
  );
  results.forEach((out, b) => {
    t.equal(out.length, batches[b]!.length);
    out.forEach((o, i) => t.ok(o.toString().includes(`src=\\"/m${b}/i${b}-${i}.png\\"`), `batch ${b} text ${i}`));
  });
});

/** A pool whose workers answer one batch each and exit on the next (fixtures/second-batch-exits-worker.ts). */
function exitingPool(): RewritePool {
  return new RewritePool(1, { workerUrl: new URL(`./fixtures/second-batch-exits-worker.js`, import.meta.url) });
}

t.test('a worker that stops fails the batch it held; a fresh worker takes the next', async (t) => {
  const pool = exitingPool();
  t.teardown(() => pool.close());
  t.same(
    await rewrittenByPool(pool, [TEXTS[0]!], PREFIX),
    [rewriteJsonText(TEXTS[0]!, PREFIX)],
    'first batch answered',
  );
  await t.rejects(rewrittenByPool(pool, [TEXTS[2]!], PREFIX), { name: 'RewriteWorkerError', message: /exit code 7/ });
  // Were the dead worker kept, this batch would never be answered and the test would time out.
  t.same(
    await rewrittenByPool(pool, [TEXTS[3]!], PREFIX),
    [rewriteJsonText(TEXTS[3]!, PREFIX)],
    'the replacement answers',
  );
});

t.test('a text the worker cannot decode fails its batch with the reason; the worker lives on', async (t) => {
  const pool = new RewritePool(1);
  t.teardown(() => pool.close());
  await t.rejects(rewrittenByPool(pool, [Buffer.from('"<img src=\\"a.png\\">')], PREFIX), {
    name: 'RewriteWorkerError',
    message: /^rewrite worker failed: .*JSON/,
  });
  const [out] = await rewrittenByPool(pool, [TEXTS[0]!], PREFIX);
  t.same(out, rewriteJsonText(TEXTS[0]!, PREFIX));
});

t.test('close() fails the batches still held and any later ones', async (t) => {
  const pool = new RewritePool(1);
  const big = json(`<p>${'<img src="a.png">'.repeat(200_000)}</p>`);
  const held = rewrittenByPool(pool, [big], PREFIX);
  await pool.close();
  // By name: the pool under test comes from t.mockImport, with its own copy of src/errors.ts.
  await t.rejects(held, { name: 'RewriteWorkerError' });
  await t.rejects(rewrittenByPool(pool, [TEXTS[0]!], PREFIX), { name: 'RewriteWorkerError', message: /closed/ });
});
