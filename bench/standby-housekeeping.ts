/**
 * Which of kb-export's own writes on the primary leave WAL records that can cancel a long export
 * on a hot standby (decisions.md D11.5, sql/0008_standby_conflicts.sql), counted in the primary's
 * WAL with pg_walinspect (shipped with the embedded binaries, so its record formats are the
 * server's). A cleanup record (a heap page pruned or vacuumed, a page marked all-visible, a b-tree
 * page's entries deleted) carries a snapshotConflictHorizon, the newest transaction whose rows it
 * removes (or, marking a page all-visible, inserted): the standby cancels, after
 * max_standby_streaming_delay, every query whose snapshot began before that transaction.
 *
 * 1. The pruning of removals (kbx_prune_changes, as the server calls it every 10 minutes,
 *    `--every`) on a simulated clock, which the function reads through a search_path of its own:
 *    32 days of users' removals (60 an hour) pruned as they age, then `--hours` (48) of pruning
 *    alone, each simulated hour in `--pace` ms (1000) with autovacuum_naptime=1s so that autovacuum
 *    keeps up. Each record is given the age of the write it cleans up: it can only cancel an export
 *    that began before that write, and none lives longer than EXPORT_MAX_DURATION_MS (1 h).
 * 2. A cold export of 2,711 generated documents (12.9 MB) from the standby, read at 300 KB/s for
 *    about 40 s, while the service's housekeeping runs beside it: keys verified for other requests
 *    every 100 ms, the pruning every 100 ms in its steady state, rewrite plans written behind this
 *    export and others (1,575). The records counted are those whose horizon is at or above its
 *    snapshot's xmin, read on the standby; `--delay` (-1) is the standby's
 *    max_standby_streaming_delay, in ms.
 *
 * `--schema=0007` applies the migrations up to 0007 only (kb-export before sql/0008); `--part=1` or
 * `--part=2` runs one part. `npm run build && node dist/bench/standby-housekeeping.js [options]`.
 */
import { rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { connect, type Sql } from '../src/db/connect.js';
import { migrate } from '../src/db/migrate.js';
import { pruneChanges, startChangePruning } from '../src/export/change-retention.js';
import { startReplicaPair, type ReplicaPair } from '../test/helpers/replica.js';
import { startServer } from '../test/helpers/app.js';
import { seedGeneratedBooks } from '../test/helpers/generated-kb.js';
import { rawGet, slowReader } from '../test/helpers/clients.js';
import { migrationsUpTo } from './lib/write-cost-variants.js';

interface Options {
  /** The last migration applied (e.g. '0006'); all when undefined. */
  schema?: string;
  /** The standby's max_standby_streaming_delay, ms (-1: wait for ever). */
  delayMs: number;
  /** Minutes between two prunings (one instance: 10). */
  everyMin: number;
  /** Simulated hours measured. */
  hours: number;
  /** Real milliseconds a simulated hour of part 1 takes. */
  paceMs: number;
  log: (line: string) => void;
}

/** Conflict-capable records by relation and record type. */
export interface RecordCount {
  rel: string;
  type: string;
  n: number;
}

type Teardowns = (() => unknown)[];

/** Applies the migrations up to `schema`, or all. */
async function migrateTo(sql: Sql, schema: string | undefined, teardowns: Teardowns): Promise<void> {
  if (schema === undefined) {
    await migrate(sql);
    return;
  }
  const dir = await migrationsUpTo(Number(schema));
  teardowns.push(() => rm(dir, { recursive: true, force: true }));
  await migrate(sql, dir);
}

async function startPair(opts: Options, teardowns: Teardowns): Promise<{ pair: ReplicaPair; primary: Sql }> {
  const standbySettings = { hot_standby_feedback: 'off', max_standby_streaming_delay: opts.delayMs };
  const pair = await startReplicaPair({ teardown: (fn) => void teardowns.push(fn) }, { standbySettings });
  // Autovacuum acts within a second of a threshold crossed: the runs are short.
  await pair.primary.configure({ autovacuum_naptime: 1 });
  const primary = connect(pair.primary.url, { max: 4, applicationName: 'kbx-bench' });
  teardowns.push(() => primary.end({ timeout: 1 }));
  await migrateTo(primary, opts.schema, teardowns);
  await primary`CREATE EXTENSION IF NOT EXISTS pg_walinspect`;
  return { pair, primary };
}

const lsn = async (sql: Sql) => (await sql<{ l: string }[]>`SELECT pg_current_wal_insert_lsn()::text AS l`)[0]!.l;
const nextXid = async (sql: Sql) =>
  Number((await sql<{ x: string }[]>`SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS x`)[0]!.x);

/** A cleanup record: its position, relation, type and snapshotConflictHorizon. */
interface CleanupRecord {
  lsn: string;
  rel: string;
  type: string;
  horizon: string;
}

/** Records between `from` and `to` whose snapshotConflictHorizon is at least `xmin`, in this database. */
async function cleanupRecords(sql: Sql, from: string, to: string, xmin: number): Promise<CleanupRecord[]> {
  return sql<CleanupRecord[]>`
    WITH r AS (
      SELECT DISTINCT ON (start_lsn) start_lsn, reltablespace, reldatabase, relfilenode, record_type,
             (regexp_match(description, 'snapshotConflictHorizon: (?:[0-9]+:)?([0-9]+)'))[1]::bigint AS horizon
      FROM pg_get_wal_block_info(${from}::pg_lsn, ${to}::pg_lsn, false)
      WHERE description LIKE '%snapshotConflictHorizon%'
      ORDER BY start_lsn, block_id)
    SELECT r.start_lsn::text AS lsn,
           coalesce(pg_filenode_relation(CASE WHEN r.reltablespace = d.dattablespace THEN 0 ELSE r.reltablespace END, r.relfilenode)::regclass::text,
                    r.relfilenode::text) AS rel,
           r.record_type AS type, r.horizon::text AS horizon
    FROM r JOIN pg_database d ON d.oid = r.reldatabase AND d.datname = current_database()
    WHERE r.horizon >= ${xmin}
    ORDER BY r.start_lsn`;
}

/** `records` counted by relation and type. */
function counted(records: { rel: string; type: string }[]): RecordCount[] {
  const counts = new Map<string, RecordCount>();
  for (const r of records) {
    const key = `${r.rel} ${r.type}`;
    const c = counts.get(key) ?? { rel: r.rel, type: r.type, n: 0 };
    c.n++;
    counts.set(key, c);
  }
  return [...counts.values()].sort((a, b) =>
    a.rel === b.rel ? a.type.localeCompare(b.type) : a.rel.localeCompare(b.rel),
  );
}

/** Records between `from` and `to` whose snapshotConflictHorizon is at least `xmin`, by relation and type. */
async function conflictCapable(sql: Sql, from: string, to: string, xmin: number): Promise<RecordCount[]> {
  return counted(await cleanupRecords(sql, from, to, xmin));
}

/** The first WAL position of each transaction from `xmin` on between `from` and `to`. */
async function firstRecords(sql: Sql, from: string, to: string, xmin: number): Promise<Map<string, bigint>> {
  const rows = await sql<{ xid: string; lsn: string }[]>`
    SELECT xid::text AS xid, min(start_lsn)::text AS lsn FROM pg_get_wal_records_info(${from}::pg_lsn, ${to}::pg_lsn)
    WHERE xid::text::bigint >= ${xmin} GROUP BY xid`;
  return new Map(rows.map((r) => [r.xid, lsnValue(r.lsn)]));
}

function lsnValue(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/** Heap writes (inserts, updates, deletes, row locks) between `from` and `to`, by relation. */
async function heapWrites(sql: Sql, from: string, to: string): Promise<RecordCount[]> {
  return sql<RecordCount[]>`
    SELECT coalesce(pg_filenode_relation(0, relfilenode)::regclass::text, relfilenode::text) AS rel, record_type AS type,
           count(DISTINCT start_lsn)::int AS n
    FROM pg_get_wal_block_info(${from}::pg_lsn, ${to}::pg_lsn, false)
    WHERE resource_manager = 'Heap' AND relforknumber = 0 AND record_type ~ '^(INSERT|UPDATE|HOT_UPDATE|DELETE|LOCK)'
    GROUP BY 1, 2 ORDER BY 1, 2`;
}

/** A conflict-capable record of the simulated hours, and how old its horizon's write was then. */
export interface AgedRecord {
  rel: string;
  type: string;
  /** Simulated minutes from the write to the record; null when the write came before the window. */
  ageMin: number | null;
}

/**
 * Part 1: the pruning's records over simulated hours, after 32 days of removals at
 * `removalsPerHour` (users' deletions, the writes it prunes 30 days later), with the age of the
 * write each one cleans up: a record can only cancel an export that began before that write.
 */
export async function simulatedPruning(
  opts: Options,
  removalsPerHour = 60,
): Promise<{ records: AgedRecord[]; writes: RecordCount[]; calls: number }> {
  const teardowns: Teardowns = [];
  try {
    const { pair, primary } = await startPair(opts, teardowns);
    await primary.unsafe(`
      CREATE SCHEMA kbx_sim;
      CREATE FUNCTION kbx_sim.now() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT current_setting('kbx_sim.now')::timestamptz $$;
      CREATE FUNCTION kbx_sim.clock_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS $$ SELECT current_setting('kbx_sim.now')::timestamptz $$;`);
    // One connection, whose now() and clock_timestamp() are the simulated clock's.
    const sim = postgres(pair.primary.url, {
      max: 1,
      onnotice: () => {},
      connection: { search_path: 'kbx_sim, public, pg_catalog' },
    });
    teardowns.push(() => sim.end({ timeout: 1 }));
    const stepMs = opts.everyMin * 60_000;
    const end = Date.now();
    const measuredFrom = end - opts.hours * 3_600_000;
    const perStep = Math.max(1, Math.round((removalsPerHour * opts.everyMin) / 60));
    const prune = async (at: number) => {
      await sim.unsafe(`SET kbx_sim.now = '${new Date(at).toISOString()}'`);
      await pruneChanges(sim as unknown as Sql, 30);
    };
    opts.log(`1. 32 simulated days of removals (${removalsPerHour} an hour) and pruning every ${opts.everyMin} min`);
    for (let at = measuredFrom - 32 * 86_400_000; at < measuredFrom; at += stepMs) {
      await primary`
        INSERT INTO document_removals (book_id, document_id, removed_xid, reason, was_category)
        SELECT 'b-sim', 'd-' || ${at} || '-' || i, pg_current_xact_id(), 'deleted', false FROM generate_series(1, ${perStep}::int) i`;
      await prune(at);
    }
    await primary`VACUUM`;
    await sleep(3000);
    const [from, xmin] = [await lsn(primary), await nextXid(primary)];
    opts.log(`1. ${opts.hours} simulated hours of pruning alone, an hour in ${opts.paceMs} ms`);
    // Where each call began in the WAL, and when on the simulated clock.
    const calls: { lsn: bigint; at: number }[] = [];
    const started = Date.now();
    for (let at = measuredFrom; at <= end; at += stepMs) {
      calls.push({ lsn: lsnValue(await lsn(primary)), at });
      await prune(at);
      const due = started + ((at - measuredFrom) / 3_600_000) * opts.paceMs;
      if (due > Date.now()) await sleep(due - Date.now());
    }
    await sleep(3000);
    const to = await lsn(primary);
    const when = (position: bigint) => {
      let at = calls[0]!.at;
      for (const c of calls) if (c.lsn <= position) at = c.at;
      return at;
    };
    const writes = await firstRecords(primary, from, to, xmin);
    const records = (await cleanupRecords(primary, from, to, xmin)).map((r) => {
      const write = writes.get(r.horizon);
      return {
        rel: r.rel,
        type: r.type,
        ageMin: write === undefined ? null : (when(lsnValue(r.lsn)) - when(write)) / 60_000,
      };
    });
    return { records, writes: await heapWrites(primary, from, to), calls: calls.length };
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}

export interface ExportRun {
  status: number;
  complete: boolean;
  count: number | null;
  documents: number;
  bytes: number;
  seconds: number;
  xmin: number;
  conflictsBefore: number;
  conflictsAfter: number;
  keyUses: number;
  plans: number;
  conflicting: RecordCount[];
  writes: RecordCount[];
}

/** Part 2: one cold export from the standby at `rate` bytes/s while the service's housekeeping runs. */
export async function exportWithHousekeeping(
  opts: Options,
  documents = 3000,
  paragraphs = 1,
  rate = 300 * 1024,
): Promise<ExportRun> {
  const teardowns: Teardowns = [];
  const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) };
  try {
    const { pair, primary } = await startPair(opts, teardowns);
    const standby = connect(pair.standby.url, { max: 2, applicationName: 'kbx-bench' });
    teardowns.push(() => standby.end({ timeout: 1 }));
    const specs = [{ slug: 'big', documents, paragraphs, seed: 1 }];
    for (let i = 0; i < 4; i++) specs.push({ slug: `other${i}`, documents: 40, paragraphs: 3, seed: 10 + i });
    const books = await seedGeneratedBooks(primary, specs);
    // Steady state: horizon samples older than the retention, so each pruning finds one to use.
    await primary`INSERT INTO change_horizons (taken_at, snapshot_xmin)
      SELECT now() - interval '3 days' - i * interval '5 minutes', pg_snapshot_xmin(pg_current_snapshot()) FROM generate_series(0, 20) i`;
    const pruning = startChangePruning(primary, {
      retentionDays: 1,
      everyMs: 100,
      onError: (e) => opts.log(`pruning failed: ${String(e)}`),
    });
    await sleep(1000);
    await primary`VACUUM ANALYZE`;
    await pair.waitForReplay(60_000);
    const env = {
      DATABASE_REPLICA_URL: pair.standby.url,
      REPLICA_MAX_LAG_MS: '600000',
      REPLICA_CHECK_INTERVAL_MS: '200',
      EXPORT_CACHE_BYTES: '0',
      MIN_DRAIN_BYTES_PER_S: '0',
      EXPORT_MAX_DURATION_MS: '600000',
    };
    const server = await startServer(t, env, { name: 'postgres', url: pair.primary.url, sql: primary });
    const conflicts = async () =>
      Number(
        (
          await standby<{ n: string }[]>`
          SELECT (confl_tablespace + confl_lock + confl_snapshot + confl_bufferpin + confl_deadlock)::text AS n
          FROM pg_stat_database_conflicts WHERE datname = current_database()`
        )[0]!.n,
      );
    const conflictsBefore = await conflicts();
    const from = await lsn(primary);
    const auth = { authorization: 'Bearer kbx_u1' };
    let stop = false;
    let keyUses = 0;
    const keys = (async () => {
      for (let i = 0; !stop; i++) {
        if (
          (await rawGet(`${server.url}/api/v1/open/books/other${i % 4}/docs?includeContentHtml=false`, auth)).status ===
          200
        )
          keyUses++;
        await sleep(100);
      }
    })();
    const others = (async () => {
      for (let i = 0; !stop; i++) {
        await rawGet(`${server.url}/api/v1/open/books/other${i % 4}/docs`, auth);
        await sleep(2000);
      }
    })();
    opts.log(
      `2. a cold export of ${documents} documents from the standby at ${Math.round(rate / 1024)} KB/s, housekeeping beside it`,
    );
    const began = Date.now();
    const reader = slowReader(`${server.url}/api/v1/open/books/big/docs`, auth, rate, { keepRate: true });
    let xmin = 0;
    while (xmin === 0 && Date.now() - began < 30_000) {
      const [row] = await standby<{ x: string | null }[]>`
        SELECT min(backend_xmin::text::bigint)::text AS x FROM pg_stat_activity
        WHERE application_name = 'kb-export-export' AND backend_xmin IS NOT NULL`;
      if (row?.x) xmin = Number(row.x);
      else await sleep(20);
    }
    const res = await reader.done;
    const seconds = (Date.now() - began) / 1000;
    stop = true;
    await Promise.all([keys, others, pruning.stop()]);
    const metric = await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_plans_total')!.get();
    const plans = metric.values.find((v) => v.labels.outcome === 'written')?.value ?? 0;
    await server.app.close();
    await sleep(2000);
    const to = await lsn(primary);
    const m = /"meta":\{"count":(\d+)\}\}$/.exec(res.body.subarray(-40).toString());
    return {
      status: res.status,
      complete: res.complete,
      count: m ? Number(m[1]) : null,
      documents: books.get('big')!.ids.length,
      bytes: res.body.length,
      seconds,
      xmin,
      conflictsBefore,
      conflictsAfter: await conflicts(),
      keyUses,
      plans,
      conflicting: await conflictCapable(primary, from, to, xmin),
      writes: await heapWrites(primary, from, to),
    };
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
  const opts: Options = {
    ...(arg('schema') !== undefined ? { schema: arg('schema')! } : {}),
    delayMs: Number(arg('delay') ?? -1),
    everyMin: Number(arg('every') ?? 10),
    hours: Number(arg('hours') ?? 48),
    paceMs: Number(arg('pace') ?? 1000),
    log: (line) => process.stderr.write(`[standby-housekeeping] ${line}\n`),
  };
  const only = arg('part');
  if (only !== '2') {
    const p = await simulatedPruning(opts);
    process.stdout.write(
      `1. pruning every ${opts.everyMin} min, ${opts.hours} simulated hours (${p.calls} calls), schema ${opts.schema ?? 'all'}\n`,
    );
    process.stdout.write(`   heap writes: ${p.writes.map((w) => `${w.rel} ${w.type} ${w.n}`).join(', ') || 'none'}\n`);
    const ages = new Map<string, number[]>();
    for (const r of p.records)
      ages.set(`${r.rel} ${r.type}`, [...(ages.get(`${r.rel} ${r.type}`) ?? []), r.ageMin ?? -1]);
    for (const [what, list] of ages)
      process.stdout.write(
        `   ${what}: ${list.length}, ages of their writes (min): ${list.sort((a, b) => a - b).join(' ')}\n`,
      );
    const young = p.records.filter((r) => r.ageMin !== null && r.ageMin < 60).length;
    process.stdout.write(
      `   ${p.records.length} conflict-capable records, ${(p.records.length / opts.hours).toFixed(2)} an hour; ` +
        `${young} of them clean up a write less than an hour old: ${(young / opts.hours).toFixed(2)} an hour\n`,
    );
  }
  if (only !== '1') {
    const r = await exportWithHousekeeping(opts);
    process.stdout.write(
      `2. export: status ${r.status}, ${r.complete ? 'complete' : 'cut'}, count ${r.count} of ${r.documents}, ${(r.bytes / 1e6).toFixed(1)} MB in ${r.seconds.toFixed(1)} s, ` +
        `snapshot xmin ${r.xmin}; ${r.keyUses} key uses, ${r.plans} plans written; standby conflicts ${r.conflictsBefore} -> ${r.conflictsAfter} ` +
        `(max_standby_streaming_delay ${opts.delayMs} ms, schema ${opts.schema ?? 'all'})\n`,
    );
    process.stdout.write(`   heap writes: ${r.writes.map((w) => `${w.rel} ${w.type} ${w.n}`).join(', ') || 'none'}\n`);
    process.stdout.write(
      `   records that can cancel it: ${r.conflicting.map((c) => `${c.rel} ${c.type} ${c.n}`).join(', ') || 'none'}\n`,
    );
  }
}
