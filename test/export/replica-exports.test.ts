/**
 * Exports read from a real hot standby (decisions.md D11.2-D11.4, D11.7; test/helpers/replica.ts):
 * the snapshot is held on the standby, never on the primary; while the standby's replay is paused
 * the body, ETag and 304 are all the standby's, but keys are verified on the primary; past
 * REPLICA_MAX_LAG_MS, or with the standby stopped (also before a check noticed), exports come from
 * the primary and /readyz stays 200.
 */
import t from 'tap';
import { connect, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { slowReader } from '../helpers/clients.js';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { call } from '../helpers/http.js';
import { startReplicaPair, type PgNode } from '../helpers/replica.js';

const MB = 1024 * 1024;
const pair = await startReplicaPair(t);
const primary: Sql = connect(pair.primary.url, { max: 4, applicationName: 'kbx-test' });
t.teardown(() => primary.end({ timeout: 1 }));
await migrate(primary);
await seed(primary, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2')]));
await seed(primary, simpleSeed([], { user: 'u2', slug: 'big' }));
// Built in PostgreSQL: about 16 MB that a slow reader keeps streaming for a while.
await primary.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
  SELECT 'l' || i, 'b-u2', 'l' || i, 'Large ' || i, 'document', 'a' || i, 1, repeat('text of a large page ', ${Math.floor((2 * MB) / 21)})
  FROM generate_series(1, 8) i`);
await pair.waitForReplay();
const db = { name: 'postgres', url: pair.primary.url, sql: primary };

/** A server reading from the standby, its lag bound `maxLagMs`. */
async function server(maxLagMs: number, checkEveryMs = 100): Promise<TestServer> {
  const env = {
    DATABASE_REPLICA_URL: pair.standby.url,
    REPLICA_MAX_LAG_MS: String(maxLagMs),
    REPLICA_CHECK_INTERVAL_MS: String(checkEveryMs),
    EXPORT_CACHE_BYTES: '0',
    MIN_DRAIN_BYTES_PER_S: '0',
  };
  return startServer(t, env, db);
}

/** Backends of kb-export's pools holding a snapshot on `node`. */
async function snapshotsOn(node: PgNode): Promise<number> {
  const [row] = await node.query(
    (sql) => sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE backend_xmin IS NOT NULL AND application_name IN ('kb-export-export', 'kbx-test-export')`,
  );
  return row!.n;
}

async function metric(s: TestServer, pattern: RegExp): Promise<boolean> {
  return pattern.test((await call(s.url, '/metrics', { auth: null })).text);
}

async function until(what: string, ok: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const KB = '/api/v1/open/books/kb/docs';
const tolerant = await server(60_000);

t.test('a slowly read export holds its snapshot on the standby, and none on the primary', async (t) => {
  const reader = slowReader(
    `${tolerant.url}/api/v1/open/books/big/docs`,
    { authorization: 'Bearer kbx_u2' },
    256 * 1024,
  );
  t.teardown(() => reader.abort());
  await until('the export streams', async () => reader.peek().status === 200);
  t.equal(await snapshotsOn(pair.standby), 1, "the export's snapshot is on the standby");
  t.equal(await snapshotsOn(pair.primary), 0, 'the primary holds no snapshot of it');
  t.ok(await metric(tolerant, /kb_export_replica_exports_total\{standby="0"\} [1-9]/), 'counted as sent to standby 0');
  t.ok(await metric(tolerant, /kb_export_replica_lag_seconds\{standby="0"\} \d/), "the standby's lag is exposed");
  reader.abort();
  await until('the snapshot ends', async () => (await snapshotsOn(pair.standby)) === 0);
});

t.test(
  "replay paused: body, ETag and 304 are the standby's; a key revoked on the primary is refused at once",
  async (t) => {
    const before = await call(tolerant.url, KB);
    t.equal(before.status, 200);
    await pair.pauseReplay();
    t.teardown(() => pair.resumeReplay());
    await primary`UPDATE documents SET name = 'Renamed on the primary' WHERE id = 'd1'`;
    const version = (node: PgNode) =>
      node
        .query((sql) => sql<{ v: string }[]>`SELECT export_version::text AS v FROM books WHERE id = 'b-u1'`)
        .then((r) => r[0]!.v);
    t.not(await version(pair.standby), await version(pair.primary), 'the standby is behind the primary');

    const behind = await call(tolerant.url, KB);
    t.equal(behind.status, 200);
    t.equal(behind.text, before.text, "the standby's body, without the change");
    t.equal(behind.headers.etag, before.headers.etag, 'under the ETag of that body');
    const cached = await call(tolerant.url, KB, { headers: { 'if-none-match': String(before.headers.etag) } });
    t.equal(cached.status, 304, "If-None-Match of the standby's ETag is 304");

    await primary`UPDATE api_keys SET revoked_at = now() WHERE id = 'k-u1'`;
    t.teardown(() => primary`UPDATE api_keys SET revoked_at = NULL WHERE id = 'k-u1'`.then(() => pair.waitForReplay()));
    t.equal(
      (await call(tolerant.url, KB)).status,
      401,
      'the revoked key is refused though the standby has not seen the revocation',
    );
    await primary`UPDATE api_keys SET revoked_at = NULL WHERE id = 'k-u1'`;

    await pair.resumeReplay();
    await pair.waitForReplay();
    const after = await call(tolerant.url, KB);
    t.equal(after.status, 200);
    t.match(after.text, /Renamed on the primary/, 'once replayed, the new body');
    t.not(after.headers.etag, before.headers.etag, 'under a new ETag');
    t.equal(
      (await call(tolerant.url, KB, { headers: { 'if-none-match': String(before.headers.etag) } })).status,
      200,
      'the old ETag no longer matches',
    );
  },
);

t.test('a standby lost since its last check: the request reads the primary instead of failing', async (t) => {
  const unaware = await server(60_000, 60_000);
  t.ok(
    await metric(unaware, /kb_export_replica_state\{standby="0",state="usable"\} 1/),
    'the standby was usable at the check',
  );
  await pair.standby.stop();
  t.teardown(async () => {
    await pair.standby.start();
    await pair.waitForReplay();
  });
  const res = await call(unaware.url, KB);
  t.equal(res.status, 200, 'served from the primary');
  t.match(res.text, /"meta":\{"count":2\}\}/);
  t.ok(
    await metric(unaware, /kb_export_replica_state\{standby="0",state="usable"\} 1/),
    'before any check noticed the standby is gone',
  );
});

t.test('a standby past REPLICA_MAX_LAG_MS, then stopped: exports from the primary, /readyz 200', async (t) => {
  const strict = await server(300);
  await pair.pauseReplay();
  t.teardown(() => pair.resumeReplay());
  await primary`UPDATE documents SET name = 'Only on the primary' WHERE id = 'd2'`;
  await until('the standby counts as lagging', () =>
    metric(strict, /kb_export_replica_state\{standby="0",state="lagging"\} 1/),
  );
  const lagging = await call(strict.url, KB);
  t.equal(lagging.status, 200);
  t.match(lagging.text, /Only on the primary/, "the primary's body");
  t.ok(
    await metric(strict, /kb_export_replica_fallbacks_total\{reason="no_usable_standby"\} [1-9]/),
    'the fallback is counted',
  );
  const ready = await call(strict.url, '/readyz', { auth: null });
  t.same([ready.status, ready.json], [200, { status: 'ready' }], 'a lagging standby leaves the server ready (D11.7)');

  await pair.resumeReplay();
  await pair.standby.stop();
  t.teardown(() => pair.standby.start());
  await until('the standby counts as down', () =>
    metric(strict, /kb_export_replica_state\{standby="0",state="down"\} 1/),
  );
  const down = await call(strict.url, KB);
  t.equal(down.status, 200);
  t.match(down.text, /Only on the primary/);
  t.equal(
    (await call(strict.url, '/readyz', { auth: null })).status,
    200,
    'a lost standby does not make the server unready (D11.7)',
  );
  const text = (await call(strict.url, '/metrics', { auth: null })).text;
  t.notOk(
    text.includes(String(pair.standby.port)) || text.includes('127.0.0.1'),
    'metrics name no host or port (D10.6)',
  );
});
