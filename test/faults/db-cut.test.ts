/**
 * The database link fails under a streaming export (decisions.md D6.2, D6.3, D8.3, D8.5): the app's
 * pools reach PostgreSQL through TCP proxies (test/helpers/tcp-proxy.ts) that cut every connection,
 * cut one after a random number of bytes, freeze the link or refuse it, at random moments of
 * exports of 150 generated documents fetched in many small batches; then the same cuts against the
 * real server in a child process, where a fault that leaves a promise unhandled stops the process.
 * Every client gets a whole valid body, a body without its terminating chunk that does not parse,
 * or an error envelope before the first byte; afterwards the server serves a whole export again and
 * no export backend is left holding a snapshot or orphaned in pg_stat_activity.
 *
 * Replay a failure with FAULT_SEED=<seed printed in the assertion message>; FAULT_SCALE=4 soaks longer.
 */
import t, { type Test } from 'tap';
import { prng } from '../../src/generate/random.js';
import { startServer as startServerProcess } from '../../bench/lib/server-process.js';
import { rawGet, type RawGetOptions } from '../helpers/clients.js';
import { createTestDatabase } from '../helpers/db.js';
import { judgeExport, tally, type Outcome } from '../helpers/export-check.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { BUSY_STATES, backends, waitForBackends, waitForNoBackends } from '../helpers/pg-activity.js';
import { EXPORT_APP, startProxiedServer, type ProxiedServer } from '../helpers/proxied-app.js';
import { isServing, recordUnhandledRejections } from '../helpers/crashes.js';
import { SEED, faultRuns } from '../helpers/fault-runs.js';
import { startTcpProxy, targetOf, type TcpProxy } from '../helpers/tcp-proxy.js';

// Each kind of fault in turn, at random moments: 8 of each in process and 3 against the child
// process by default, FAULT_SCALE times that for a soak.
const RUNS = faultRuns(24);
const PROCESS_RUNS = faultRuns(9);
const AUTH = { authorization: 'Bearer kbx_u1' };
// Small batches: an export is about 20 FETCHes, so a cut lands between, during or inside them.
const ENV = {
  EXPORT_BATCH_SIZE: '8',
  EXPORT_CACHE_BYTES: '0',
  DB_TIMEOUT_MS: '2000',
  EXPORT_CONCURRENCY: '2',
  STALL_TIMEOUT_MS: '20000',
};

const unhandled = recordUnhandledRejections(t);
const db = await createTestDatabase(t);
// About 0.5 MB with HTML, 0.3 MB without.
const book = (await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 150, paragraphs: 1 }])).get('kb')!;
const server = await startProxiedServer(t, db, ENV);
const exportFilter = { applicationName: EXPORT_APP, database: db.name };

/** Where an export runs: its server's base URL and the proxies in front of its pools. */
interface Rig {
  base: string;
  /** The proxy of the export pool. */
  exports: TcpProxy;
  /** Every proxy in front of the server's pools (exports included). */
  all: TcpProxy[];
}

/** One kind of export, measured once without faults. */
interface Target {
  url: string;
  ids: string[];
  /** The whole body, to which an aborted one must be a prefix. */
  body: Buffer;
  /** Bytes of the whole response, and PostgreSQL -> server bytes through the export proxy. */
  rawBytes: number;
  dbBytes: number;
  ms: number;
}

async function measure(rig: Rig, query: string): Promise<Target> {
  const url = `${rig.base}/api/v1/open/books/kb/docs${query}`;
  const before = rig.exports.stats().bytesToClient;
  const started = Date.now();
  const res = await rawGet(url, AUTH);
  const verdict = judgeExport(res, { ids: book.ids });
  if (!verdict.ok || verdict.outcome !== 'complete')
    throw new Error(`the export ${query} without faults is not whole: ${JSON.stringify(verdict)}`);
  return {
    url,
    ids: book.ids,
    body: res.body,
    rawBytes: res.raw.length,
    dbBytes: rig.exports.stats().bytesToClient - before,
    ms: Date.now() - started,
  };
}

const rigOf = (s: ProxiedServer): Rig => ({ base: s.url, exports: s.exportProxy, all: [s.exportProxy, s.lookupProxy] });

/** Asserts that no export backend holds a snapshot and that a normal export through `s` is whole. */
async function assertRecovered(t: Test, s: ProxiedServer, what: string): Promise<void> {
  const busy = await waitForNoBackends(db.sql, { ...exportFilter, states: BUSY_STATES });
  t.strictSame(busy, [], `${what}: no export backend is left in a transaction or a query`);
  const verdict = judgeExport(await rawGet(`${s.url}/api/v1/open/books/kb/docs`, AUTH), { ids: book.ids });
  t.strictSame(verdict, { ok: true, outcome: 'complete' }, `${what}: the next export is whole`);
}

/**
 * `runs` exports, each with one fault at a random moment, the three kinds in turn: a cut after a
 * random number of bytes of the PostgreSQL -> server stream, every export connection cut once the
 * client has a random number of bytes, or every connection of every pool cut after a random delay.
 * Returns the outcomes and the problems (responses that break the rules).
 */
async function cutRuns(
  rig: Rig,
  runs: number,
  rnd: () => number,
): Promise<{ outcomes: Outcome[]; problems: string[] }> {
  const withHtml = await measure(rig, '');
  const withoutHtml = await measure(rig, '?includeContentHtml=false');
  const problems: string[] = [];
  const outcomes: Outcome[] = [];
  for (let run = 0; run < runs; run++) {
    const target = rnd() < 0.7 ? withHtml : withoutHtml;
    const mode = run % 3;
    const at = rnd();
    let fault: string;
    const opts: RawGetOptions = { deadlineMs: 20_000 };
    let timer: NodeJS.Timeout | undefined;
    if (mode === 0) {
      // Anywhere in the stream (a little past its end: no cut at all).
      const bytes = Math.floor(at * target.dbBytes * 1.05);
      rig.exports.cutAfter(bytes);
      fault = `cutAfter(${bytes})`;
    } else if (mode === 1) {
      const bytes = Math.floor(at * target.rawBytes);
      let cut = false;
      opts.onProgress = (received) => {
        if (!cut && received >= bytes) {
          cut = true;
          rig.exports.cutAll();
        }
      };
      fault = `cutAll() once the client had ${bytes} bytes`;
    } else {
      // A lookup may be hit too: then 503 before the first byte.
      const ms = Math.floor(at * target.ms);
      timer = setTimeout(() => rig.all.forEach((p) => p.cutAll()), ms);
      fault = `cutAll() of every pool after ${ms} ms`;
    }
    const res = await rawGet(target.url, AUTH, opts);
    clearTimeout(timer);
    rig.exports.cutAfter(null);
    const verdict = res.timedOut ? { ok: false as const, problem: 'no answer within 20 s' } : judgeExport(res, target);
    if (verdict.ok) outcomes.push(verdict.outcome);
    else problems.push(`run ${run} (${fault}, ${target === withHtml ? 'with' : 'without'} HTML): ${verdict.problem}`);
  }
  return { outcomes, problems };
}

t.test(`${RUNS} cuts of the database link at random moments of an export (seed ${SEED})`, async (t) => {
  const { outcomes, problems } = await cutRuns(rigOf(server), RUNS, prng(SEED));
  t.strictSame(
    problems,
    [],
    `seed ${SEED}: every response is whole and valid, aborted, or an envelope before the first byte`,
  );
  t.strictSame(unhandled, [], `seed ${SEED}: no promise of the server was left rejected and unhandled`);
  t.ok(outcomes.includes('aborted'), `seed ${SEED}: some cuts landed in the middle of a body (${tally(outcomes)})`);
  t.comment(`seed ${SEED}: ${tally(outcomes)}; ${server.exportProxy.stats().cuts} export connections cut`);
});

t.test(
  `the server process (bench/server.ts) behind a proxy: ${PROCESS_RUNS} cuts, and it still serves (seed ${SEED})`,
  async (t) => {
    const proxy = await startTcpProxy(t, targetOf(db.url));
    const proc = await startServerProcess({ databaseUrl: proxy.urlFor(db.url), env: ENV });
    t.teardown(() => proc.stop());
    const { outcomes, problems } = await cutRuns(
      { base: proc.base, exports: proxy, all: [proxy] },
      PROCESS_RUNS,
      prng(SEED + 1),
    );
    // src/server.ts shuts down on an unhandled rejection or exception (close-with-grace).
    if (!(await isServing(proc.base, proc.pid))) {
      t.fail(
        `seed ${SEED}: the server process stopped serving during the cuts (${problems.length} responses broke the rules)`,
      );
      return;
    }
    t.strictSame(
      problems,
      [],
      `seed ${SEED}: every response is whole and valid, aborted, or an envelope before the first byte`,
    );
    t.comment(`seed ${SEED}: ${tally(outcomes)}`);
    const busy = await waitForNoBackends(db.sql, {
      applicationName: 'kb-export-export',
      database: db.name,
      states: BUSY_STATES,
    });
    t.strictSame(busy, [], 'no export backend of the server process is left in a transaction or a query');
    const verdict = judgeExport(await rawGet(`${proc.base}/api/v1/open/books/kb/docs`, AUTH), { ids: book.ids });
    t.strictSame(verdict, { ok: true, outcome: 'complete' }, 'the next export is whole');
  },
);

t.test('after the cuts: a whole export, no snapshot left open, no orphaned export backend', async (t) => {
  await assertRecovered(t, server, 'after the cuts');
  // Every export backend still in PostgreSQL is one the pool holds through the proxy: a backend
  // whose link was cut has gone, none is left behind for its idle-in-transaction timeout.
  const settled = await waitForBackends(db.sql, exportFilter, (b) => b.length === server.exportProxy.stats().open);
  t.equal(
    settled.length,
    server.exportProxy.stats().open,
    `backends ${JSON.stringify(settled)} = open proxied connections`,
  );
  t.ok(settled.length <= 2, `at most EXPORT_CONCURRENCY (2) export connections: ${settled.length}`);
});

t.test('the link refused: 503 SERVICE_UNAVAILABLE before the first byte, then served again (D8.5)', async (t) => {
  const s = await startProxiedServer(t, db, ENV);
  s.exportProxy.refuse(true);
  const res = await rawGet(`${s.url}/api/v1/open/books/kb/docs`, AUTH, { deadlineMs: 20_000 });
  t.strictSame(
    judgeExport(res, { ids: book.ids }),
    { ok: true, outcome: '503 SERVICE_UNAVAILABLE' },
    'an envelope, not a hang',
  );
  t.ok(s.exportProxy.stats().accepted > 0, 'the pool did try to connect');
  s.exportProxy.refuse(false);
  await assertRecovered(t, s, 'refusal lifted');
});

t.test('the link frozen before the first byte: 503 SERVICE_UNAVAILABLE within DB_TIMEOUT_MS (D8.5)', async (t) => {
  const s = await startProxiedServer(t, db, ENV);
  await assertRecovered(t, s, 'before'); // the pool now holds an idle connection for the stall to catch
  s.exportProxy.stall();
  const res = await rawGet(`${s.url}/api/v1/open/books/kb/docs`, AUTH, { deadlineMs: 20_000 });
  t.notOk(res.timedOut, 'answered before the 20 s deadline');
  t.strictSame(judgeExport(res, { ids: book.ids }), { ok: true, outcome: '503 SERVICE_UNAVAILABLE' });
  s.exportProxy.resume();
  await assertRecovered(t, s, 'link thawed');
});

t.test(
  'the link frozen mid-export: EXPORT_MAX_DURATION_MS aborts the body; thawed, the connection comes back (D8.3)',
  async (t) => {
    const s = await startProxiedServer(t, db, { ...ENV, EXPORT_MAX_DURATION_MS: '3000' });
    const whole = await measure(rigOf(s), ''); // and the pool now holds an idle connection
    let stalled = false;
    const res = await rawGet(whole.url, AUTH, {
      deadlineMs: 30_000,
      onProgress: () => {
        if (!stalled) s.exportProxy.stall();
        stalled = true;
      },
    });
    t.notOk(res.timedOut, 'the client was not left waiting for 30 s');
    t.strictSame(judgeExport(res, whole), { ok: true, outcome: 'aborted' }, 'the body was aborted, not completed');
    const frozen = await backends(db.sql, exportFilter);
    t.comment(`while frozen, after the abort: export backends ${JSON.stringify(frozen)}`);
    s.exportProxy.resume();
    await assertRecovered(t, s, 'link thawed');
  },
);
