/**
 * Scenario 12 (decisions.md D11.2, D11.5): exports on a hot standby. On a throw-away primary and
 * hot standby (test/helpers/replica.ts: the embedded binaries, free ports), a generated knowledge
 * base is exported through the real server from the primary and from the standby, interleaved,
 * as a ratio in the same run. Then, while one export holds its snapshot (a client that reads
 * nothing), editors update rows of the same table and VACUUM runs on the primary: the dead rows it
 * could not remove (as VACUUM VERBOSE reports them) are counted with the export on the primary, on
 * the standby with hot_standby_feedback=on, and on the standby with it off.
 *
 * `npm run build && node dist/bench/replica.js [--quick]`; `npm run bench` runs it as scenario 12.
 */
import net from 'node:net';
import { Readable } from 'node:stream';
import postgres from 'postgres';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type Sql } from '../src/db/connect.js';
import { migrate } from '../src/db/migrate.js';
import { loadSeed } from '../src/load/seed-loader.js';
import { startReplicaPair, type ReplicaPair } from '../test/helpers/replica.js';
import { exportOnce, median } from './lib/http-client.js';
import { startServer, type ServerProcess } from './lib/server-process.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';

const SCENARIO = '12. Hot standby';
const KEY = 'kbx_replica_bench';
const SLUG = 'replica';
const BOOK = 'bench-replica';
/** Rows the editors update while an export holds its snapshot. */
const EDITED = 5000;

/** The generated book: `documents` rows of about 4 KB of text each, built in PostgreSQL. */
async function createBook(sql: Sql, documents: number): Promise<void> {
  await migrate(sql);
  const seed = {
    users: [{ id: 'bench-replica-user', name: 'Bench', apiKeys: [{ id: 'k-bench-replica', key: KEY }] }],
    books: [],
  };
  await loadSeed(sql, Readable.from([JSON.stringify(seed)]));
  await sql`INSERT INTO books (id, owner_id, slug, name) VALUES (${BOOK}, 'bench-replica-user', ${SLUG}, 'Replica bench')`;
  await sql.unsafe(
    `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
     SELECT 'r' || lpad(i::text, 7, '0'), $1, 'r' || i, 'Page ' || i, 'document', lpad(i::text, 7, '0'), 1,
            repeat('A paragraph of page ' || i || ' in the replica benchmark. ', 80)
     FROM generate_series(1, $2::int) i`,
    [BOOK, documents],
  );
  await sql`VACUUM ANALYZE documents`;
}

/** A GET whose client reads nothing after the first bytes: the export holds its snapshot until close(). */
async function heldExport(base: string): Promise<{ close(): void }> {
  const u = new URL(base);
  const socket = net.connect(Number(u.port), u.hostname);
  socket.on('error', () => {});
  socket.write(
    `GET /api/v1/open/books/${SLUG}/docs HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
  );
  await new Promise<void>((resolve) => socket.once('data', () => resolve()));
  socket.pause();
  return { close: () => socket.destroy() };
}

/**
 * Dead rows of `documents` one `VACUUM (VERBOSE)` on the primary could not remove, from its own
 * report ("N are dead but not yet removable"): exact at once, where pg_stat_user_tables.n_dead_tup
 * takes an UPDATE's count only when that session next flushes its statistics. One connection of
 * its own, which hears the notices.
 */
function vacuumReport(url: string): { kept(): Promise<number>; end(): Promise<void> } {
  let notices: string[] = [];
  const sql = postgres(url, { max: 1, onnotice: (n) => void notices.push(String(n.message)) });
  return {
    async kept() {
      notices = [];
      await sql`VACUUM (VERBOSE) documents`;
      const report = notices.find((m) => /vacuuming "[^"]*\bdocuments"/.test(m) && /not yet removable/.test(m));
      const m = /(\d+) are dead but not yet removable/.exec(report ?? '');
      if (!m) throw new Error(`VACUUM VERBOSE said nothing of the rows it kept: ${notices.join(' | ')}`);
      return Number(m[1]);
    },
    end: () => sql.end({ timeout: 1 }),
  };
}

/**
 * Dead rows of `documents` that VACUUM on the primary kept, having updated EDITED rows while `hold`
 * holds an export. The round starts once VACUUM keeps nothing, so an xmin an earlier round left on
 * the primary (the standby's last feedback, an export not yet ended) is not counted here.
 */
async function deadRowsKept(
  sql: Sql,
  vacuumKept: () => Promise<number>,
  hold: () => Promise<{ close(): void }>,
  settle: () => Promise<void>,
): Promise<number> {
  for (let until = Date.now() + 60_000; (await vacuumKept()) > 0; await sleep(200)) {
    if (Date.now() > until) throw new Error('VACUUM still kept rows a minute after the last round');
  }
  const held = await hold();
  try {
    await settle();
    await sql.unsafe(
      `UPDATE documents SET content_yjs = '\\x00'::bytea WHERE id IN (SELECT id FROM documents WHERE book_id = $1 ORDER BY id LIMIT ${EDITED})`,
      [BOOK],
    );
    return await vacuumKept();
  } finally {
    held.close();
  }
}

/** Waits until the primary sees the standby's feedback xmin (hot_standby_feedback on) or none (off). */
async function feedbackIs(pair: ReplicaPair, on: boolean): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const [row] = await pair.primary.query(
      (sql) => sql<{ xmin: string | null }[]>`SELECT backend_xmin::text AS xmin FROM pg_stat_replication`,
    );
    if ((row?.xmin != null) === on) return;
    await sleep(100);
  }
  throw new Error(`the primary never saw hot_standby_feedback ${on ? 'on' : 'off'}`);
}

/** Scenario 12; `quick`: a smaller knowledge base and fewer runs. */
export async function run(opts: { quick: boolean; log: (line: string) => void }): Promise<ScenarioResult> {
  const { quick, log } = opts;
  const documents = quick ? 5_000 : 25_000;
  const runs = quick ? 2 : 3;
  const teardowns: (() => unknown)[] = [];
  const servers: ServerProcess[] = [];
  try {
    log(`12. a primary and a hot standby, ${documents.toLocaleString('en')} documents`);
    const pair = await startReplicaPair({ teardown: (fn) => void teardowns.push(fn) });
    const sql = connect(pair.primary.url, { max: 2, applicationName: 'kb-export-bench' });
    teardowns.push(() => sql.end({ timeout: 1 }));
    await createBook(sql, documents);
    await pair.waitForReplay(60_000);
    const env = { EXPORT_CACHE_BYTES: '0', REWRITE_WORKERS: '0' };
    const onPrimary = await startServer({ databaseUrl: pair.primary.url, env });
    servers.push(onPrimary);
    const onStandby = await startServer({
      databaseUrl: pair.primary.url,
      env: { ...env, DATABASE_REPLICA_URL: pair.standby.url, REPLICA_MAX_LAG_MS: '60000' },
    });
    servers.push(onStandby);

    const primaryMs: number[] = [];
    const standbyMs: number[] = [];
    let bytes = 0;
    await exportOnce(onPrimary.base, KEY, SLUG, { html: false });
    await exportOnce(onStandby.base, KEY, SLUG, { html: false });
    for (let i = 0; i < runs; i++) {
      log(`12. export from the primary and from the standby, run ${i + 1}/${runs}`);
      const p = await exportOnce(onPrimary.base, KEY, SLUG, { html: false });
      const s = await exportOnce(onStandby.base, KEY, SLUG, { html: false });
      if (p.count !== documents || s.count !== documents)
        throw new Error(`exports returned ${p.count} and ${s.count} documents`);
      primaryMs.push(p.totalMs);
      standbyMs.push(s.totalMs);
      bytes = s.bytes;
    }
    const [pm, sm] = [median(primaryMs), median(standbyMs)];

    log('12. dead rows VACUUM must keep while an export holds its snapshot');
    const vacuum = vacuumReport(pair.primary.url);
    teardowns.push(() => vacuum.end());
    const noWait = async () => {};
    const baseline = await deadRowsKept(sql, vacuum.kept, async () => ({ close: () => {} }), noWait);
    const held = { primary: 0, feedbackOn: 0, feedbackOff: 0 };
    held.primary = await deadRowsKept(sql, vacuum.kept, () => heldExport(onPrimary.base), noWait);
    await pair.standby.configure({ hot_standby_feedback: 'on' });
    await feedbackIs(pair, true);
    held.feedbackOn = await deadRowsKept(
      sql,
      vacuum.kept,
      () => heldExport(onStandby.base),
      () => feedbackIs(pair, true),
    );
    await pair.standby.configure({ hot_standby_feedback: 'off' });
    await feedbackIs(pair, false);
    held.feedbackOff = await deadRowsKept(sql, vacuum.kept, () => heldExport(onStandby.base), noWait);

    const rows: ResultRow[] = [
      {
        scenario: SCENARIO,
        what: `the same export (${documents.toLocaleString('en')} documents, ${mb(bytes)}) from a hot standby against from the primary, median of ${runs}`,
        baseline: `primary ${fmt(pm / 1000, 2)} s`,
        measured: `standby ${fmt(sm / 1000, 2)} s`,
        ratio: sm / pm,
        target: '',
        met: null,
      },
      {
        scenario: SCENARIO,
        what: `dead rows VACUUM on the primary could not remove, ${EDITED.toLocaleString('en')} rows updated while one export held its snapshot`,
        baseline: `no export: ${baseline}`,
        measured: `export on the primary: ${held.primary}; on the standby, feedback on: ${held.feedbackOn}; feedback off: ${held.feedbackOff}`,
        ratio: held.feedbackOff / Math.max(1, held.primary),
        target: '',
        met: null,
      },
    ];
    return {
      rows,
      notes: [
        `${SCENARIO}: with hot_standby_feedback off the primary vacuums as if no export ran; the standby then holds the cleanup's replay back for up to max_standby_streaming_delay (30 s by default) before it cancels the export (decisions.md D11.5).`,
      ],
    };
  } finally {
    for (const s of servers) await s.stop().catch(() => {});
    for (const fn of teardowns.reverse()) await fn();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const quick = process.argv.includes('--quick');
  const result = await run({ quick, log: (line) => process.stderr.write(`[replica] ${line}\n`) });
  for (const r of result.rows)
    process.stdout.write(`| ${r.scenario} | ${r.what} | ${r.baseline} | ${r.measured} | ${fmt(r.ratio, 2)}× |\n`);
  for (const n of result.notes) process.stdout.write(`${n}\n`);
}
