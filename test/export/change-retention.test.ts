/**
 * Pruning of removals (decisions.md D12.4, src/export/change-retention.ts): removals older than
 * CHANGE_RETENTION_DAYS go, a token that may need them is then 410, newer ones stay; idempotent,
 * one instance at a time; the floor moves at most once an hour and rows are deleted once a day, a
 * call with nothing to do writes nothing (sql/0008). Time passes by back-dating horizon samples,
 * as if they had been taken that long ago.
 */
import t from 'tap';
import type { Sql } from '../../src/db/connect.js';
import { connect } from '../../src/db/connect.js';
import { pruneChanges, startChangePruning } from '../../src/export/change-retention.js';
import { ChangeTokens } from '../../src/export/change-token.js';
import { readChangeState } from '../../src/export/change-state.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';

const OPTS = { excludeCategories: true, includeContentHtml: true };

/** Deletes document `id` in a transaction of its own; returns that transaction's id. */
async function remove(sql: Sql, id: string): Promise<bigint> {
  return sql.begin(async (tx) => {
    await tx`DELETE FROM documents WHERE id = ${id}`;
    return BigInt((await tx<{ x: string }[]>`SELECT pg_current_xact_id()::text AS x`)[0]!.x);
  });
}

const removed = async (sql: Sql) =>
  (await sql<{ id: string }[]>`SELECT document_id AS id FROM document_removals ORDER BY 1`).map((r) => r.id);
const floor = async (sql: Sql) =>
  BigInt((await sql<{ f: string }[]>`SELECT token_floor::text AS f FROM change_tracking`)[0]!.f);
const sample = (sql: Sql, ago: string, xmin: bigint) =>
  sql`INSERT INTO change_horizons (taken_at, snapshot_xmin) VALUES (now() - ${ago}::interval, ${xmin.toString()}::xid8)`;
const state = (sql: Sql) =>
  sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', (tx) =>
    readChangeState((text, params) => tx.unsafe(text, params) as never, 'b-u1'),
  );

t.test(
  'removals older than the retention are deleted, a token that needs them is then 410, newer ones stay',
  async (t) => {
    const { sql } = await createTestDatabase(t);
    await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2'), doc('d3', 'a3')]));
    const [{ secret }] = (await sql`SELECT token_secret AS secret FROM change_tracking`) as unknown as [
      { secret: Buffer },
    ];
    const tokens = new ChangeTokens({ secret, retentionDays: 30, mediaProxyPrefix: '/media/', outputFormat: '1' });
    const old = tokens.issue(await state(sql), OPTS);
    const x1 = await remove(sql, 'd1');
    const x2 = await remove(sql, 'd2');

    t.equal(await pruneChanges(sql, 30), 0, 'no horizon is old enough yet');
    t.same(await removed(sql), ['d1', 'd2']);
    // As if, 31 days ago, a snapshot had been sampled just after d1's removal committed.
    await sample(sql, '30 days 61 minutes', x1 + 1n);
    await sample(sql, '29 days', x2 + 1n);
    t.equal(await pruneChanges(sql, 30), 1, 'the removal before the horizon older than 30 days and an hour');
    t.same(await removed(sql), ['d2'], 'the newer removal is kept');
    t.equal(await floor(sql), x1 + 1n);
    const now = await state(sql);
    let refusal: unknown;
    try {
      tokens.accept(old, now, OPTS);
    } catch (err) {
      refusal = err;
    }
    t.match(
      refusal,
      { reason: 'pruned', statusCode: 410 },
      'the token issued before d1 was removed can no longer be honoured',
    );

    t.equal(await pruneChanges(sql, 30), 0, 'again: nothing more');
    await sample(sql, '40 days', 3n);
    await pruneChanges(sql, 30);
    t.equal(await floor(sql), x1 + 1n, 'an older horizon never moves the floor down');
    t.equal(await pruneChanges(sql, 1), 1, 'a shorter retention reaches the newer horizon');
    t.same(await removed(sql), []);
    t.equal(await floor(sql), x2 + 1n);
    const [{ n }] =
      (await sql`SELECT count(*)::int AS n FROM change_horizons WHERE taken_at < now() - interval '1 day'`) as unknown as [
        { n: number },
      ];
    t.equal(n, 1, 'horizons more than a day older than the one in use are deleted');
  },
);

t.test(
  'the floor moves by an hour or more, rows go once a day, and a call with nothing to do writes nothing',
  async (t) => {
    const { sql } = await createTestDatabase(t);
    await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2'), doc('d3', 'a3'), doc('d4', 'a4')]));
    const x = [await remove(sql, 'd1'), await remove(sql, 'd2'), await remove(sql, 'd3'), await remove(sql, 'd4')];
    // Samples on one day, 32 days ago and more, and one on the next: all older than the retention.
    const day = (sql: Sql, offset: string, xmin: bigint) =>
      sql`INSERT INTO change_horizons (taken_at, snapshot_xmin)
        VALUES (date_trunc('day', now() - interval '32 days') + ${offset}::interval, ${xmin.toString()}::xid8)`;
    const written = async () => (await sql<{ x: string }[]>`SELECT xmin::text AS x FROM change_tracking`)[0]!.x;

    await day(sql, '1 hour', x[0]! + 1n);
    t.equal(await pruneChanges(sql, 30), 1, 'the first time, the floor moves and the removal below it goes');
    t.equal(await floor(sql), x[0]! + 1n);
    const row = await written();
    const samples = async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM change_horizons`)[0]!.n;
    const before = await samples();

    await day(sql, '1 hour 30 minutes', x[1]! + 1n);
    t.equal(await pruneChanges(sql, 30), 0, 'half an hour later');
    t.equal(await floor(sql), x[0]! + 1n, 'the floor waits for an hour of samples');
    t.equal(await written(), row, 'and change_tracking is not written');
    t.equal(await samples(), before + 1, 'no sample deleted, none taken within 5 minutes of the last');

    await day(sql, '2 hours 30 minutes', x[2]! + 1n);
    t.equal(await pruneChanges(sql, 30), 0, 'an hour and a half later, the same day');
    t.equal(await floor(sql), x[2]! + 1n, 'the floor moves');
    t.same(await removed(sql), ['d2', 'd3', 'd4'], 'the removals below it wait for the next day');

    await day(sql, '1 day 10 minutes', x[3]! + 1n);
    t.equal(await pruneChanges(sql, 30), 3, 'the next day');
    t.equal(await floor(sql), x[3]! + 1n);
    t.same(await removed(sql), [], 'they go with the floor');
    t.equal(await pruneChanges(sql, 30), 0, 'again: nothing to do');
  },
);

t.test('a horizon is sampled at most every 5 minutes', async (t) => {
  const { sql } = await createTestDatabase(t);
  const count = async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM change_horizons`)[0]!.n;
  await pruneChanges(sql, 30);
  await pruneChanges(sql, 30);
  t.equal(await count(), 1);
  const [{ x }] = (await sql`SELECT snapshot_xmin::text AS x FROM change_horizons`) as unknown as [{ x: string }];
  const [{ next }] = (await sql`SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS next`) as unknown as [
    { next: string },
  ];
  t.ok(BigInt(x) <= BigInt(next), 'the xmin of a snapshot taken then');
});

t.test('several instances at once: one prunes, the others return at once', async (t) => {
  const { sql, url } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2')]));
  const x = await remove(sql, 'd1');
  await remove(sql, 'd2');
  await sample(sql, '31 days 2 hours', x + 1n);
  const holder = await sql.reserve();
  t.teardown(() => holder.release());
  await holder`BEGIN`;
  await holder`SELECT pg_advisory_xact_lock(7212345006)`;
  t.equal(await pruneChanges(sql, 30), 0, 'another instance is pruning: this one does not wait');
  await holder`COMMIT`;
  const pools = Array.from({ length: 4 }, () => connect(url, { max: 1, applicationName: 'kbx-test-prune' }));
  t.teardown(() => Promise.all(pools.map((p) => p.end({ timeout: 1 }))));
  const counts = await Promise.all(pools.map((p) => pruneChanges(p, 30)));
  t.equal(
    counts.reduce((a, b) => a + b, 0),
    1,
    `one removal deleted once in all (${counts.join(', ')})`,
  );
  t.same(await removed(sql), ['d2']);
});

t.test('startChangePruning runs at once, then again, reports failures and stops', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1')]));
  const x = await remove(sql, 'd1');
  await sample(sql, '31 days 2 hours', x + 1n);
  const runs: number[] = [];
  const errors: unknown[] = [];
  let ran!: () => void;
  const twice = new Promise<void>((r) => (ran = r));
  const pruning = startChangePruning(sql, {
    retentionDays: 30,
    everyMs: 10,
    onPruned: (n) => {
      runs.push(n);
      if (runs.length === 2) ran();
    },
    onError: (err) => errors.push(err),
  });
  await twice;
  await pruning.stop();
  const after = runs.length;
  t.same(runs.slice(0, 2), [1, 0], 'the first run deleted the old removal, the next found nothing');
  t.same(errors, []);
  await new Promise((r) => setTimeout(r, 50));
  t.equal(runs.length, after, 'no run in five periods after stop()');

  const unreachable = connect('postgres://postgres@127.0.0.1:1/none', {
    max: 1,
    applicationName: 'kbx-test-prune',
    connectTimeoutS: 1,
  });
  t.teardown(() => unreachable.end({ timeout: 1 }));
  let failed!: (err: unknown) => void;
  const failure = new Promise<unknown>((r) => (failed = r));
  const broken = startChangePruning(unreachable, { retentionDays: 30, everyMs: 10_000, onError: (err) => failed(err) });
  t.match(await failure, { code: 'ECONNREFUSED' }, 'a failed run is reported, not thrown');
  await broken.stop();
});
