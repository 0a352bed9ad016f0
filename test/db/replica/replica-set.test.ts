/**
 * ReplicaSet against a real primary and hot standby (decisions.md D11.4, D10.3, D10.6): lag near
 * zero on an idle primary, past the bound while replay is paused (pick() falls back to the
 * primary), down when the standby stops or its link freezes, back after; fallbacks logged once
 * when they start and once when they end; metrics and statuses name no host.
 */
import { Registry } from 'prom-client';
import t, { type Test } from 'tap';
import { connect, type Sql } from '../../../src/db/connect.js';
import { registerReplicaMetrics } from '../../../src/db/replica/replica-metrics.js';
import { loadConfig } from '../../../src/config.js';
import { openReplicaSet, ReplicaSet, type ReplicaStatus } from '../../../src/db/replica/replica-set.js';
import { startReplicaPair } from '../../helpers/replica.js';
import { startTcpProxy } from '../../helpers/tcp-proxy.js';

const MAX_LAG_MS = 600;
const INTERVAL_MS = 100;
/** Generous: a check slower than this on a loaded machine would make a healthy standby look down. */
const CHECK_TIMEOUT_MS = 2000;

const pair = await startReplicaPair(t);
const pools: Sql[] = [];
t.teardown(() => Promise.all(pools.map((p) => p.end({ timeout: 1 }))));
const pool = (url: string, max: number) => {
  const sql = connect(url, { max, applicationName: 'kbx-test-replica', connectTimeoutS: 2, fetchTypes: false });
  pools.push(sql);
  return sql;
};
const primarySql = pool(pair.primary.url, 2);
await primarySql`CREATE TABLE ticks (id serial PRIMARY KEY, at timestamptz DEFAULT now())`;
await pair.waitForReplay();

interface Line {
  level: 'warn' | 'info';
  obj: object;
  msg: string;
}

/** A started ReplicaSet over `urls` (standbys), closed at the test's end, and what it logs. */
async function replicaSet(t: Test, urls: string[], primary = primarySql): Promise<{ set: ReplicaSet; lines: Line[] }> {
  const lines: Line[] = [];
  const set = new ReplicaSet({
    primary,
    // Not pool(): the set ends its standbys' pools itself.
    standbys: urls.map((url) => ({
      sql: connect(url, { max: 2, applicationName: 'kbx-test-replica', connectTimeoutS: 2, fetchTypes: false }),
      checkSql: connect(url, {
        max: 1,
        applicationName: 'kbx-test-replica-check',
        connectTimeoutS: 2,
        fetchTypes: false,
      }),
    })),
    maxLagMs: MAX_LAG_MS,
    intervalMs: INTERVAL_MS,
    timeoutMs: CHECK_TIMEOUT_MS,
    log: {
      warn: (obj, msg) => void lines.push({ level: 'warn', obj, msg }),
      info: (obj, msg) => void lines.push({ level: 'info', obj, msg }),
    },
  });
  t.teardown(() => set.close());
  await set.start();
  return { set, lines };
}

async function waitFor(what: string, ok: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const state = (set: ReplicaSet, i = 0): ReplicaStatus => set.status()[i]!;
const messages = (lines: Line[]) => lines.map((l) => l.msg);
const FALLBACK_START = 'replica unavailable: exports read from the primary until one is back';
const FALLBACK_END = 'replica available again: exports read from replicas';

t.test('an idle primary: the standby is usable with lag near zero, however long ago the last commit was', async (t) => {
  const { set, lines } = await replicaSet(t, [pair.standby.url]);
  await primarySql`INSERT INTO ticks DEFAULT VALUES`;
  await pair.waitForReplay();
  // Idle for longer than the bound: a lag guessed from the last commit's time would now exceed it.
  await new Promise((resolve) => setTimeout(resolve, 2 * MAX_LAG_MS));
  const [naive] = await pair.standby.query(
    (sql) => sql<{ ms: number }[]>`SELECT extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000 AS ms`,
  );
  t.ok(
    Number(naive!.ms) > MAX_LAG_MS,
    `the time since the last replayed commit is ${Math.round(Number(naive!.ms))} ms`,
  );
  const s = state(set);
  t.equal(s.state, 'usable', JSON.stringify(s));
  t.ok(s.lagMs !== null && s.lagMs < MAX_LAG_MS / 2, `measured lag ${s.lagMs} ms`);
  const picked = set.pick();
  t.equal(picked?.name, 'replica 0');
  const [row] = await picked!.sql<{ recovery: boolean }[]>`SELECT pg_is_in_recovery() AS recovery`;
  t.equal(row!.recovery, true, 'pick() hands out the standby');
  t.same(lines, [], 'nothing logged');
});

t.test(
  'replay paused and a change committed on the primary: lag grows past the bound, exports fall back to the primary',
  async (t) => {
    const { set, lines } = await replicaSet(t, [pair.standby.url]);
    const registry = new Registry();
    registerReplicaMetrics(registry, set);
    await waitFor('usable', () => state(set).state === 'usable');
    await pair.pauseReplay();
    t.teardown(() => pair.resumeReplay());
    await primarySql`INSERT INTO ticks DEFAULT VALUES`;
    // The primary is idle again from here: a stuck standby must not look fresh for that.
    await waitFor('lagging', () => state(set).state === 'lagging');
    const s = state(set);
    t.ok(s.lagMs! > MAX_LAG_MS, `lag ${s.lagMs} ms`);
    t.equal(s.reason, `lag over ${MAX_LAG_MS} ms`);
    const growing = s.lagMs!;
    await waitFor('lag still growing', () => state(set).lagMs! > growing + 2 * INTERVAL_MS);
    t.equal(set.pick(), null, 'pick() falls back to the primary');
    t.equal(set.pick(), null);
    t.equal(set.fallbacks, 2, 'each export sent to the primary is counted');
    const text = await registry.metrics();
    const lag = Number(/^kb_export_replica_lag_seconds\{standby="0"\} (\S+)$/m.exec(text)?.[1]);
    t.ok(lag > MAX_LAG_MS / 1000, `kb_export_replica_lag_seconds ${lag}`);
    t.match(text, /^kb_export_replica_state\{standby="0",state="lagging"\} 1$/m);
    t.match(text, /^kb_export_replica_fallbacks_total\{reason="no_usable_standby"\} 2$/m);

    await pair.resumeReplay();
    await waitFor('usable again', () => state(set).state === 'usable');
    t.ok(set.pick() !== null, 'the standby is used again');
    t.same(
      messages(lines),
      [FALLBACK_START, FALLBACK_END],
      'the fallback logged once when it started and once when it ended',
    );
    t.match(lines[1]!.obj, { exports: 2 });
    t.match(await registry.metrics(), /^kb_export_replica_exports_total\{standby="0"\} 1$/m);
  },
);

t.test('a stopped standby is down and exports fall back; after its restart it is used again', async (t) => {
  const { set, lines } = await replicaSet(t, [pair.standby.url]);
  await waitFor('usable', () => state(set).state === 'usable');
  await pair.standby.stop();
  t.teardown(() => pair.standby.start());
  await waitFor('down', () => state(set).state === 'down');
  t.same(state(set), { index: 0, state: 'down', lagMs: null, reason: 'no answer' });
  t.equal(set.pick(), null);
  await pair.standby.start();
  await waitFor('usable again', () => state(set).state === 'usable');
  t.same(messages(lines), [FALLBACK_START, FALLBACK_END]);
  t.ok((lines[0]!.obj as { replicas: { err?: unknown }[] }).replicas[0]!.err, 'the cause is in the log line');
});

t.test(
  'standbys are used in turn; one whose link freezes is down within the check timeout, the other takes its exports',
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: pair.standby.port });
    const { set, lines } = await replicaSet(t, [pair.standby.url, proxy.urlFor(pair.standby.url)]);
    await waitFor('both usable', () => set.status().every((s) => s.state === 'usable'));
    t.same([set.pick()?.index, set.pick()?.index, set.pick()?.index, set.pick()?.index], [0, 1, 0, 1], 'round robin');
    proxy.stall();
    const frozenAt = Date.now();
    await waitFor('replica 1 down', () => state(set, 1).state === 'down');
    t.ok(Date.now() - frozenAt < CHECK_TIMEOUT_MS + 2000, `down ${Date.now() - frozenAt} ms after the link froze`);
    t.same([set.pick()?.index, set.pick()?.index], [0, 0], 'only the usable one is picked');
    t.equal(set.fallbacks, 0, 'no fallback while one standby is usable');
    proxy.resume();
    proxy.cutAll();
    await waitFor('replica 1 usable again', () => state(set, 1).state === 'usable');
    t.same(
      messages(lines),
      ['replica 1 down: no answer', 'replica 1 usable again'],
      'one line per change, no fallback',
    );

    const registry = new Registry();
    registerReplicaMetrics(registry, set);
    const text = await registry.metrics();
    const everything = JSON.stringify(set.status()) + text;
    for (const secret of ['127.0.0.1', String(pair.standby.port), String(proxy.port), pair.password]) {
      t.notOk(
        everything.includes(secret),
        `statuses and metrics do not name ${secret === pair.password ? 'the password' : secret}`,
      );
    }
  },
);

t.test(
  'openReplicaSet: the standbys of DATABASE_REPLICA_URL; none configured, none picked and no fallback counted',
  async (t) => {
    const config = loadConfig({
      DATABASE_URL: pair.primary.url,
      DATABASE_REPLICA_URL: `${pair.standby.url},${pair.standby.url}`,
      REPLICA_MAX_LAG_MS: String(MAX_LAG_MS),
      REPLICA_CHECK_INTERVAL_MS: String(INTERVAL_MS),
    });
    const quiet = { warn: () => {}, info: () => {} };
    const set = openReplicaSet(config, primarySql, quiet);
    t.teardown(() => set.close());
    await set.start();
    await waitFor('both usable', () => set.status().every((s) => s.state === 'usable'));
    t.same([set.pick()?.name, set.pick()?.name], ['replica 0', 'replica 1']);
    const [row] = await set.pick()!.sql<{ name: string }[]>`SELECT current_setting('application_name') AS name`;
    t.equal(row!.name, 'kb-export-export', 'the export pool');

    const none = openReplicaSet(loadConfig({ DATABASE_URL: pair.primary.url }), primarySql, quiet);
    await none.start();
    t.equal(none.pick(), null);
    t.equal(none.fallbacks, 0);
    t.same(none.status(), []);
    await none.close();
  },
);

t.test(
  "the primary's position cannot be read: its last known one is used, and without any the standby is not used",
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: pair.primary.port });
    const { set } = await replicaSet(t, [pair.standby.url], pool(proxy.urlFor(pair.primary.url), 1));
    await waitFor('usable', () => state(set).state === 'usable');
    proxy.refuse(true);
    proxy.cutAll();
    await new Promise((resolve) => setTimeout(resolve, 3 * INTERVAL_MS));
    t.equal(state(set).state, 'usable', 'the standby has replayed all the primary had when last seen');

    proxy.refuse(true);
    const { set: blind, lines } = await replicaSet(t, [pair.standby.url], pool(proxy.urlFor(pair.primary.url), 1));
    t.same(state(blind), { index: 0, state: 'lagging', lagMs: null, reason: "the primary's WAL position is unknown" });
    t.equal(blind.pick(), null);
    t.same(messages(lines), [FALLBACK_START]);
  },
);

t.test('a promoted standby is not a standby: down, exports go to the primary', async (t) => {
  const { set, lines } = await replicaSet(t, [pair.standby.url]);
  await waitFor('usable', () => state(set).state === 'usable');
  await pair.promote();
  await waitFor('down', () => state(set).state === 'down');
  t.equal(state(set).reason, 'not in recovery (promoted?)');
  t.equal(set.pick(), null);
  t.same(messages(lines), [FALLBACK_START]);
});
