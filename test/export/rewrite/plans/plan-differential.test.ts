/**
 * Rewrite plans change no byte of an export (src/export/rewrite/plans/plan-store.ts, rewrite-plan.ts,
 * sql/0005_rewrite_plans.sql): over the generated bench corpus, the rewriter's input -> expected
 * pairs, pages of the PostgreSQL manual and random HTML (fast-check), exports with plans (cold,
 * then warm, on the event loop and on a worker) are byte-identical to exports without them, also
 * after documents change, after the prefix changes between a plan's creation and its use, and
 * with a corrupt or misplaced stored plan. Each warm export is shown to reuse plans, so the
 * comparison is between the two paths, not the same path twice.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import t from 'tap';
import { request } from 'undici';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../../../helpers/app.js';
import { createTestDatabase } from '../../../helpers/db.js';
import { seedGeneratedBooks } from '../../../helpers/generated-kb.js';
import { storableHtml } from '../../../helpers/html-arbitrary.js';
import { sourceUrl } from '../../../helpers/paths.js';

const FIXTURES = sourceUrl(import.meta.url, '../fixtures/');
const cases = JSON.parse(readFileSync(new URL('rewriter-cases.json', FIXTURES), 'utf8')) as { input: string }[];
const manual = readdirSync(new URL('pg-manual/', FIXTURES)).map((f) =>
  readFileSync(new URL(`pg-manual/${f}`, FIXTURES), 'utf8'),
);
const random = fc.sample(storableHtml, { numRuns: 400, seed: 13 });

const db = await createTestDatabase(t);
// PostgreSQL stores no NUL: the cases that hold one keep the rest of their text.
const htmls = [...cases.map((c) => c.input.replace(/\0/g, '')), ...manual, ...random];
await seedGeneratedBooks(db.sql, [{ slug: 'bench', documents: 300, paragraphs: 6, seed: 7 }]);
// A second book of the same user (u1, made above), with the hand-made and random documents.
const mixed = simpleSeed(
  htmls.map((h, i) => doc(`d${String(i).padStart(4, '0')}`, `a${String(i).padStart(4, '0')}`, { contentHtml: h })),
  { slug: 'mixed', bookId: 'b-mixed' },
);
await seed(db.sql, { users: [], books: mixed.books });

/** The body of an export of `slug`; fails the test on anything but a 200. */
async function exportBody(server: TestServer, slug: string): Promise<Buffer> {
  const res = await request(`${server.url}/api/v1/open/books/${slug}/docs`, {
    headers: { authorization: 'Bearer kbx_u1' },
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200)
    throw new Error(`export of ${slug}: ${res.statusCode} ${body.subarray(0, 200).toString()}`);
  return body;
}

/** kb_export_rewrite_plans_total by outcome, from the app's registry. */
async function planCounts(server: TestServer): Promise<Record<string, number>> {
  const metric = await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_plans_total')!.get();
  return Object.fromEntries(metric.values.map((v) => [String(v.labels.outcome), v.value]));
}

/** Rows of rewrite_plans. */
async function storedPlans(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`;
  return row!.n;
}

/** Waits until every plan the server computed was written, dropped or failed (the writer drained). */
async function plansSettled(): Promise<void> {
  let last = -1;
  for (let i = 0; i < 200; i++) {
    const n = await storedPlans();
    if (n === last) return;
    last = n;
    await sleep(50);
  }
  throw new Error('rewrite plans still being written after 10 s');
}

const base = { EXPORT_CACHE_BYTES: '0', EXPORT_BATCH_SIZE: '64' };
const reference = await startServer(t, { ...base, REWRITE_PLANS: 'false', REWRITE_WORKERS: '0' }, db);
const inline = await startServer(t, { ...base, REWRITE_WORKERS: '0' }, db);
const pooled = await startServer(t, { ...base, REWRITE_WORKERS: '1', REWRITE_OFFLOAD_BYTES: '0' }, db);
const otherPrefixRef = await startServer(t, { ...base, REWRITE_PLANS: 'false', MEDIA_PROXY_PREFIX: '/cdn/media' }, db);
const otherPrefix = await startServer(t, { ...base, MEDIA_PROXY_PREFIX: '/cdn/media' }, db);

for (const slug of ['mixed', 'bench']) {
  t.test(`${slug}: cold, then warm exports with plans equal exports without them`, async (t) => {
    await db.sql`DELETE FROM rewrite_plans`;
    const expected = await exportBody(reference, slug);
    t.ok((await exportBody(inline, slug)).equals(expected), 'cold, on the event loop, plans being written');
    await plansSettled();
    const n = await storedPlans();
    t.ok(n > 0, `${n} plans stored`);
    for (const [name, server] of [
      ['event loop', inline],
      ['worker', pooled],
    ] as const) {
      const before = await planCounts(server);
      t.ok((await exportBody(server, slug)).equals(expected), `warm, ${name}: byte-identical`);
      const after = await planCounts(server);
      t.ok(
        after.reused! - before.reused! >= n,
        `warm, ${name}: ${after.reused! - before.reused!} rows spliced from stored plans`,
      );
      t.equal(after.computed, before.computed, `warm, ${name}: nothing tokenized`);
    }
  });
}

t.test('documents that changed since their plan was made are tokenized again, and their plans replaced', async (t) => {
  await exportBody(inline, 'mixed');
  await plansSettled();
  const changed = await db.sql<{ id: string }[]>`
    UPDATE documents SET content_html = content_html || '<img src="changed.png">'
    WHERE id IN (SELECT document_id FROM rewrite_plans WHERE document_id LIKE 'd%' ORDER BY document_id LIMIT 5) RETURNING id`;
  const expected = await exportBody(reference, 'mixed');
  t.match(expected.toString(), /\/media\/changed\.png/, 'the change is in the export');
  const before = await planCounts(inline);
  t.ok((await exportBody(inline, 'mixed')).equals(expected), 'byte-identical after the change');
  const after = await planCounts(inline);
  t.equal(after.computed! - before.computed!, changed.length, 'exactly the changed documents were tokenized');
  await plansSettled();
  t.ok((await exportBody(inline, 'mixed')).equals(expected), 'and again, from their new plans');
  t.equal((await planCounts(inline)).computed, after.computed, 'with nothing tokenized');
});

t.test("a prefix change between a plan's creation and its use: plans of the old prefix are not used", async (t) => {
  await exportBody(inline, 'mixed');
  await plansSettled();
  const expected = await exportBody(otherPrefixRef, 'mixed');
  t.match(expected.toString(), /\/cdn\/media\//, 'the other prefix is in the export');
  const before = await planCounts(otherPrefix);
  t.ok((await exportBody(otherPrefix, 'mixed')).equals(expected), 'byte-identical under the new prefix');
  const after = await planCounts(otherPrefix);
  t.equal(after.reused, before.reused, 'no plan of /media/ was reused');
  await plansSettled();
  t.ok((await exportBody(otherPrefix, 'mixed')).equals(expected), 'warm under the new prefix');
  t.ok((await planCounts(otherPrefix)).reused! > after.reused!, 'from its own plans');
  t.ok(
    (await exportBody(inline, 'mixed')).equals(await exportBody(reference, 'mixed')),
    'and the old prefix still exports its own bytes',
  );
});

t.test('a corrupt or misplaced stored plan is never applied', async (t) => {
  await exportBody(inline, 'mixed');
  await plansSettled();
  const expected = await exportBody(reference, 'mixed');
  const plans = await db.sql<{ document_id: string; plan_key: Buffer; plan: Buffer }[]>`
    SELECT document_id, plan_key, plan FROM rewrite_plans WHERE octet_length(plan) > 0 AND document_id LIKE 'd%' ORDER BY document_id LIMIT 3`;
  t.equal(plans.length, 3, 'three documents of the book with edits');
  const [a, b, c] = [plans[0]!, plans[1]!, plans[2]!];
  // a: its own key, a damaged plan; b: a's plan under b's key; c: b's key and plan moved to c.
  await db.sql`UPDATE rewrite_plans SET plan = '\\xffffffffff0a' WHERE document_id = ${a.document_id}`;
  await db.sql`UPDATE rewrite_plans SET plan = ${a.plan} WHERE document_id = ${b.document_id}`;
  await db.sql`UPDATE rewrite_plans SET plan_key = ${b.plan_key}, plan = ${b.plan} WHERE document_id = ${c.document_id}`;
  const before = await planCounts(inline);
  t.ok((await exportBody(inline, 'mixed')).equals(expected), 'byte-identical');
  const after = await planCounts(inline);
  t.equal(after.computed! - before.computed!, 3, 'the three were tokenized again');
  await plansSettled();
  const [fixed] = await db.sql<{ plan: Buffer }[]>`SELECT plan FROM rewrite_plans WHERE document_id = ${a.document_id}`;
  t.notSame(fixed!.plan, Buffer.from('ffffffffff0a', 'hex'), 'the corrupt plan was replaced');
});

t.test('plans go with their documents', async (t) => {
  await exportBody(inline, 'bench');
  await plansSettled();
  const [row] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM rewrite_plans JOIN documents ON id = document_id WHERE book_id = 'b-bench'`;
  t.ok(row!.n > 0, 'the book has plans');
  await db.sql`DELETE FROM books WHERE id = 'b-bench'`;
  const [orphans] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM rewrite_plans p WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = p.document_id)`;
  t.equal(orphans!.n, 0, 'deleting the book removed its plans');
  t.ok((await storedPlans()) > 0, 'the other book keeps its own');
});
