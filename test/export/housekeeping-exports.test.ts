/**
 * The service's own writes on the primary cancel no export on a hot standby and never hold its
 * replay back (decisions.md D11.5, sql/0008_standby_conflicts.sql, sql/0011_plan_vacuum_threshold.sql):
 * a cold export read from the standby at about 300 KB/s for about 40 s, while the service's
 * housekeeping runs on the primary beside it (keys verified for other requests, the pruning of
 * removals every 100 ms in its steady state, rewrite plans written behind this export and others,
 * more than autovacuum's 1,000, and 150 of them rolled back by the database), arrives whole; the standby counts no conflict, and its startup process never waits on one. The standby
 * runs as the README's "Scaling out" recommends without hot_standby_feedback:
 * max_standby_streaming_delay at EXPORT_MAX_DURATION_MS. Autovacuum looks every second, so it gets
 * to the tables those writes touch while the export runs. Long: about a minute.
 */
import t from 'tap';
import { connect, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { startChangePruning } from '../../src/export/change-retention.js';
import { rawGet, slowReader } from '../helpers/clients.js';
import { startServer } from '../helpers/app.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { startReplicaPair } from '../helpers/replica.js';

const EXPORT_MAX_DURATION_MS = 120_000;
const pair = await startReplicaPair(t, {
  standbySettings: {
    hot_standby_feedback: 'off',
    max_standby_streaming_delay: `${EXPORT_MAX_DURATION_MS}ms`,
    // A wait names the WAL record it waits on (its type, relation and block) in the standby's log.
    log_recovery_conflict_waits: 'on',
    log_min_messages: 'log',
  },
});
await pair.primary.configure({ autovacuum_naptime: 1 });
const primary: Sql = connect(pair.primary.url, { max: 4, applicationName: 'kbx-test' });
t.teardown(() => primary.end({ timeout: 1 }));
const standby: Sql = connect(pair.standby.url, { max: 2, applicationName: 'kbx-test' });
t.teardown(() => standby.end({ timeout: 1 }));
await migrate(primary);
// About 13 MB of JSON, two thirds of its documents with media to plan: 1,500 plans or more.
const specs = [{ slug: 'big', documents: 3000, paragraphs: 1, seed: 1 }];
for (let i = 0; i < 4; i++) specs.push({ slug: `other${i}`, documents: 40, paragraphs: 3, seed: 10 + i });
const books = await seedGeneratedBooks(primary, specs);
// While the test holds this advisory lock, the database rolls back every batch of plans the
// service writes, as a statement timeout would, leaving their rows dead. Advisory locks write no
// WAL, so the switch itself conflicts with nothing on the standby.
const REFUSE_PLANS = 7212345011;
await primary.unsafe(`
  CREATE FUNCTION kbx_test_refuse_plans() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(${REFUSE_PLANS}) THEN
      RAISE EXCEPTION 'plans refused by the test';
    END IF;
    RETURN NULL;
  END $$`);
await primary`
  CREATE TRIGGER kbx_test_refuse_plans AFTER INSERT ON rewrite_plans
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_test_refuse_plans()`;

/** Recovery conflicts the standby has counted in this database. */
const conflicts = async () =>
  (
    await standby<{ n: number }[]>`
    SELECT (confl_tablespace + confl_lock + confl_snapshot + confl_bufferpin + confl_deadlock)::int AS n
    FROM pg_stat_database_conflicts WHERE datname = current_database()`
  )[0]!.n;

t.test(
  "a slow export from the standby is whole while the service's housekeeping runs, and replay never waits for it",
  async (t) => {
    // The pruning's steady state: horizon samples older than the retention, the floor moved once.
    await primary`
    INSERT INTO change_horizons (taken_at, snapshot_xmin)
    SELECT now() - interval '3 days' - i * interval '5 minutes', pg_snapshot_xmin(pg_current_snapshot()) FROM generate_series(0, 20) i`;
    let prunings = 0;
    const failures: unknown[] = [];
    let firstRun!: () => void;
    const ranOnce = new Promise<void>((resolve) => (firstRun = resolve));
    const pruning = startChangePruning(primary, {
      retentionDays: 1,
      everyMs: 100,
      onPruned: () => {
        if (++prunings === 1) firstRun();
      },
      onError: (err) => failures.push(err),
    });
    t.teardown(() => pruning.stop());
    await ranOnce;
    await primary`VACUUM ANALYZE`;
    await pair.waitForReplay(60_000);

    const server = await startServer(
      t,
      {
        DATABASE_REPLICA_URL: pair.standby.url,
        REPLICA_CHECK_INTERVAL_MS: '200',
        EXPORT_CACHE_BYTES: '0',
        MIN_DRAIN_BYTES_PER_S: '0',
        EXPORT_MAX_DURATION_MS: String(EXPORT_MAX_DURATION_MS),
      },
      { name: 'postgres', url: pair.primary.url, sql: primary },
    );
    const auth = { authorization: 'Bearer kbx_u1' };
    const before = await conflicts();
    const prunedBefore = prunings;

    let exporting = true;
    // The startup process replays WAL; it waits on a recovery conflict until the query ends or the delay runs out.
    const waits: string[] = [];
    const watch = (async () => {
      while (exporting) {
        const rows = await standby<{ w: string }[]>`
        SELECT wait_event_type || ':' || wait_event AS w FROM pg_stat_activity
        WHERE backend_type = 'startup' AND (wait_event LIKE 'RecoveryConflict%' OR wait_event_type IN ('Lock', 'BufferPin'))`;
        waits.push(...rows.map((r) => r.w));
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    let keyUses = 0;
    const keys = (async () => {
      for (let i = 0; exporting; i++) {
        if (
          (await rawGet(`${server.url}/api/v1/open/books/other${i % 4}/docs?includeContentHtml=false`, auth)).status ===
          200
        )
          keyUses++;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    let others = 0;
    const otherExports = (async () => {
      for (let i = 0; exporting; i++) {
        if ((await rawGet(`${server.url}/api/v1/open/books/other${i % 4}/docs`, auth)).complete) others++;
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();

    const planCount = async (outcome: string) =>
      (await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_plans_total')!.get()).values.find(
        (v) => v.labels.outcome === outcome,
      )?.value ?? 0;
    // After five seconds of plans written, the database rolls them back until 150 have failed, three
    // times autovacuum's default of 50 dead rows, or for 25 s at most: how many a second the export
    // plans depends on the machine's speed.
    const refusing = (async () => {
      await new Promise((r) => setTimeout(r, 5000));
      const lock = await primary.reserve();
      try {
        await lock`SELECT pg_advisory_lock(${REFUSE_PLANS})`;
        for (const until = Date.now() + 25_000; exporting && Date.now() < until && (await planCount('failed')) < 150;)
          await new Promise((r) => setTimeout(r, 100));
        await lock`SELECT pg_advisory_unlock(${REFUSE_PLANS})`;
      } finally {
        lock.release();
      }
    })();
    const began = Date.now();
    const reader = slowReader(`${server.url}/api/v1/open/books/big/docs`, auth, 300 * 1024, { keepRate: true });
    t.teardown(() => reader.abort());
    const res = await reader.done;
    const seconds = (Date.now() - began) / 1000;
    exporting = false;
    await Promise.all([watch, keys, otherExports, pruning.stop(), refusing]);
    const written = await planCount('written');
    const failed = await planCount('failed');
    // The export's session reports its statistics, a conflict count with them, when it ends.
    await server.app.close();

    t.equal(res.status, 200);
    t.ok(res.complete, 'the body got its terminating chunk');
    const body = JSON.parse(res.body.toString()) as { documents: { id: string }[]; meta: { count: number } };
    const expected = books.get('big')!.ids;
    t.equal(body.meta.count, body.documents.length, 'meta.count is the number of documents');
    t.same(
      body.documents.map((d) => d.id),
      expected,
      `all ${expected.length} documents, in order`,
    );
    t.ok(seconds > 25, `read slowly: ${res.body.length} bytes in ${seconds.toFixed(1)} s`);
    t.ok(prunings - prunedBefore > 100, `the pruning ran ${prunings - prunedBefore} times meanwhile`);
    t.same(failures, []);
    t.ok(keyUses > 50, `${keyUses} other requests verified their key`);
    t.ok(others > 5, `${others} other exports`);
    t.ok(written > 1000, `${written} rewrite plans written behind the exports`);
    t.ok(failed > 100, `${failed} plans rolled back meanwhile, more than autovacuum's default 50 dead rows`);
    t.same(waits, [], "the standby's replay never waited on a recovery conflict", {
      standbyLog: pair.standby.log.tail(40),
    });
    let after = await conflicts();
    for (
      const until = Date.now() + 2000;
      after === before && Date.now() < until;
      await new Promise((r) => setTimeout(r, 100))
    )
      after = await conflicts();
    t.equal(after, before, 'the standby cancelled nothing');
  },
);
