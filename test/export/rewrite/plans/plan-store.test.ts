/**
 * Writing rewrite plans behind the exports (src/export/rewrite/plans/plan-store.ts): a queue full in
 * plans or bytes drops instead of waiting; batches sent while others are in flight each write and
 * count their own plans; a plan of a document deleted meanwhile is skipped; and when the plans'
 * connection to PostgreSQL freezes (a real TCP proxy in between), exports go on with the same
 * bytes, the lost plans are counted and logged within DB_TIMEOUT_MS, and plans are written again
 * once it is back. Stored plans read back with their rows byte for byte from bytea's hex text, and never
 * from another output format.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import { request } from 'undici';
import { connect } from '../../../../src/db/connect.js';
import { DOC, documentIdOf, type DocumentRow } from '../../../../src/export/snapshot/rows.js';
import { PlanWriter, readStoredPlan } from '../../../../src/export/rewrite/plans/plan-store.js';
import { documentQuery } from '../../../../src/export/snapshot/query.js';
import { startServer, type TestServer } from '../../../helpers/app.js';
import { createTestDatabase } from '../../../helpers/db.js';
import { seedGeneratedBooks } from '../../../helpers/generated-kb.js';
import { recordUnhandledRejections } from '../../../helpers/crashes.js';
import { startTcpProxy, targetOf } from '../../../helpers/tcp-proxy.js';

const db = await createTestDatabase(t);
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 120, paragraphs: 3, seed: 5 }]);
const ids = (await db.sql<{ id: string }[]>`SELECT id FROM documents ORDER BY id LIMIT 3`).map((r) => r.id);
const key = (n: number) => Buffer.alloc(32, n);

async function storedPlans(): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`;
  return row!.n;
}

t.test("readStoredPlan over the cursor's rows: every byte value read back from hex; escape output, none", async (t) => {
  await db.sql`TRUNCATE rewrite_plans`;
  const plan = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
  await db.sql`INSERT INTO rewrite_plans (document_id, plan_key, plan) VALUES (${ids[0]!}, ${key(0xab)}, ${plan})`;
  const [book] = await db.sql<{ book_id: string }[]>`SELECT book_id FROM documents WHERE id = ${ids[0]!}`;
  const query = documentQuery({ excludeCategories: false, includeContentHtml: true, withPlans: true });
  const read = (output: 'hex' | 'escape') =>
    db.sql.begin(async (tx) => {
      await tx.unsafe(`SET LOCAL bytea_output = ${output}`);
      const rows = (await tx.unsafe(query, [book!.book_id]).raw()) as unknown as DocumentRow[];
      return new Map(
        rows.flatMap((row) => {
          const stored = readStoredPlan(row[DOC.plan]);
          return stored ? [[documentIdOf(row), stored] as const] : [];
        }),
      );
    });
  const found = await read('hex');
  t.same([...found.keys()], [ids[0]], 'the one stored plan, with its row');
  t.ok(found.get(ids[0]!)!.subarray(0, 32).equals(key(0xab)), 'its key');
  t.ok(found.get(ids[0]!)!.subarray(32).equals(plan), 'then its plan, all 256 byte values');
  t.equal((await read('escape')).size, 0, 'a column not in hex is no plan');
});

t.test("a full queue drops instead of waiting; a deleted document's plan is skipped", async (t) => {
  await db.sql`TRUNCATE rewrite_plans`;
  const writer = new PlanWriter(db.sql, { maxQueued: 2 });
  t.ok(writer.offer(ids[0]!, key(1), Buffer.from([1])));
  t.ok(writer.offer('no-such-document', key(2), Buffer.from([2])));
  t.notOk(writer.offer(ids[1]!, key(3), Buffer.from([3])), 'the third is dropped: the queue holds two');
  t.ok(writer.offer(ids[0]!, key(4), Buffer.from([4])), 'a document already queued takes its newer plan in its place');
  await writer.close();
  t.same(writer.counts, { written: 1, dropped: 1, failed: 0 }, 'one written, none for the missing document');
  const [row] = await db.sql<{ plan_key: Buffer }[]>`SELECT plan_key FROM rewrite_plans WHERE document_id = ${ids[0]!}`;
  t.same(row!.plan_key, key(4), 'with its newest plan');
  t.notOk(writer.offer(ids[2]!, key(5), Buffer.from([5])), 'a closed writer takes no more');
});

t.test('the queue is bounded in bytes too; one plan larger than the bound is taken alone', async (t) => {
  await db.sql`TRUNCATE rewrite_plans`;
  const writer = new PlanWriter(db.sql, { maxQueuedBytes: 100 });
  t.ok(writer.offer(ids[0]!, key(1), Buffer.alloc(500, 1)), 'a plan over the bound, into an empty queue');
  t.notOk(writer.offer(ids[1]!, key(2), Buffer.alloc(10, 2)), 'nothing beside it');
  await writer.drain();
  t.ok(writer.offer(ids[1]!, key(2), Buffer.alloc(10, 2)), 'once it is written, 42 bytes');
  t.ok(writer.offer(ids[2]!, key(3), Buffer.alloc(10, 3)), '84 bytes');
  t.notOk(writer.offer(ids[0]!, key(4), Buffer.alloc(10, 4)), '126 bytes: dropped');
  await writer.close();
  t.same(writer.counts, { written: 3, dropped: 2, failed: 0 });
  t.equal(await storedPlans(), 3);
});

t.test('batches in flight together: every plan written once, with its own bytes, and counted', async (t) => {
  await db.sql`TRUNCATE rewrite_plans`;
  const all = (await db.sql<{ id: string }[]>`SELECT id FROM documents ORDER BY id`).map((r) => r.id);
  const planOf = (i: number) => Buffer.alloc((i % 50) + 1, i);
  // Small bounds in plans and bytes, so batches of both kinds are sent while earlier ones are in flight.
  const writer = new PlanWriter(db.sql, { batchSize: 7, batchBytes: 300 });
  const taken = all.filter((id, i) => writer.offer(id, key(i % 256), planOf(i)));
  t.equal(taken.length, all.length, `all ${all.length} queued`);
  await writer.close();
  t.same(writer.counts, { written: all.length, dropped: 0, failed: 0 }, 'each counted once');
  const rows = await db.sql<{ document_id: string; plan_key: Buffer; plan: Buffer }[]>`SELECT * FROM rewrite_plans`;
  const wrong = rows.filter((r) => {
    const i = all.indexOf(r.document_id);
    return !r.plan_key.equals(key(i % 256)) || !r.plan.equals(planOf(i));
  });
  t.equal(rows.length, all.length, 'each stored');
  t.same(wrong, [], 'under its own document');
});

async function exportBody(server: TestServer): Promise<Buffer> {
  const res = await request(`${server.url}/api/v1/open/books/kb/docs`, { headers: { authorization: 'Bearer kbx_u1' } });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`export: ${res.statusCode}`);
  return body;
}

t.test(
  "the plans' connection frozen: exports are unchanged, lost plans counted and logged, written again later",
  async (t) => {
    await db.sql`TRUNCATE rewrite_plans`;
    const proxy = await startTcpProxy(t, targetOf(db.url));
    const planSql = connect(proxy.urlFor(db.url), {
      max: 1,
      applicationName: 'kbx-test-plans',
      connectTimeoutS: 2,
      fetchTypes: false,
    });
    t.teardown(() => planSql.end({ timeout: 1 }));
    const reference = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false' }, db);
    const lines: string[] = [];
    const server = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_WORKERS: '0', DB_TIMEOUT_MS: '1000' }, db, {
      planSql,
      logger: new Writable({
        write(chunk: Buffer, _enc, done) {
          lines.push(chunk.toString());
          done();
        },
      }),
    });
    const counts = async () => {
      const metric = await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_plans_total')!.get();
      return Object.fromEntries(metric.values.map((v) => [String(v.labels.outcome), v.value]));
    };
    const expected = await exportBody(reference);

    await planSql`SELECT 1`;
    proxy.stall();
    t.ok(
      (await exportBody(server)).equals(expected),
      'the export is whole and unchanged while plans cannot be written',
    );
    const computed = (await counts()).computed!;
    t.ok(computed > 0, `${computed} plans computed`);
    for (let i = 0; i < 100 && (await counts()).failed! < computed; i++) await new Promise((r) => setTimeout(r, 100));
    t.equal((await counts()).failed, computed, 'each counted as failed, within DB_TIMEOUT_MS');
    t.equal(await storedPlans(), 0, 'none stored');
    t.ok(
      lines.some((l) => l.includes('rewrite plans not written')),
      'and logged',
    );

    proxy.resume();
    // The frozen INSERT settles once the link is back (and may write its plans itself); until it
    // has, plans are dropped. Export until every plan is stored.
    let whole = true;
    for (let i = 0; i < 50 && (await storedPlans()) < computed; i++) {
      whole &&= (await exportBody(server)).equals(expected);
      await new Promise((r) => setTimeout(r, 200));
    }
    t.ok(whole, 'exports with the link back are whole and unchanged');
    t.equal(await storedPlans(), computed, 'every plan is stored');
  },
);

t.test("the plans' connection cut while plans are written: nothing crashes, exports stay whole", async (t) => {
  const rejections = recordUnhandledRejections(t);
  const uncaught: string[] = [];
  const onUncaught = (err: Error) => void uncaught.push(err.stack ?? String(err));
  process.on('uncaughtExceptionMonitor', onUncaught);
  t.teardown(() => process.removeListener('uncaughtExceptionMonitor', onUncaught));
  const proxy = await startTcpProxy(t, targetOf(db.url));
  const planSql = connect(proxy.urlFor(db.url), {
    max: 1,
    applicationName: 'kbx-test-plans',
    connectTimeoutS: 2,
    fetchTypes: false,
  });
  t.teardown(() => planSql.end({ timeout: 1 }));
  const reference = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false' }, db);
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_WORKERS: '0', DB_TIMEOUT_MS: '1000' }, db, {
    planSql,
  });
  const expected = await exportBody(reference);
  let whole = 0;
  for (let i = 0; i < 12; i++) {
    await db.sql`TRUNCATE rewrite_plans`;
    if ((await exportBody(server)).equals(expected)) whole++;
    // The writer starts on the next turn of the event loop: cut before, during or after its INSERT.
    await new Promise((r) => setTimeout(r, i * 3));
    proxy.cutAll();
  }
  t.equal(whole, 12, 'every export whole and unchanged');
  await new Promise((r) => setTimeout(r, 300));
  t.same(rejections, [], 'no unhandled rejection');
  t.same(uncaught, [], 'no uncaught exception');
  t.ok((await exportBody(server)).equals(expected), 'the server still exports');
});
