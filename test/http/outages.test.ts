/**
 * Dependencies that fail fail cleanly (decisions.md D8.5): with PostgreSQL or the rate-limit store
 * unreachable, or a lock that an export would wait on, the answer is 503 SERVICE_UNAVAILABLE with
 * Retry-After within seconds, the outage is logged once, not per request, and ioredis prints
 * nothing outside the JSON log.
 */
import t, { type Test } from 'tap';
import { freePort } from '../../src/db/free-port.js';
import { call } from '../helpers/http.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase, lockDocuments } from '../helpers/db.js';
import { startLoggedServer } from '../helpers/logged-app.js';
import { startTcpProxy, targetOf } from '../helpers/tcp-proxy.js';

const PATH = '/api/v1/open/books/kb/docs';
// One database for the file: each test reads it through a server of its own and gives back any lock.
const db = await createTestDatabase(t);
await seed(db.sql, simpleSeed([doc('d1', 'a0')]));

function assertUnavailable(t: Test, res: Awaited<ReturnType<typeof call>>, startedAt: number, limitMs: number): void {
  t.equal(res.status, 503);
  t.equal(res.json?.success, false);
  t.equal(res.json?.code, 'SERVICE_UNAVAILABLE');
  t.ok(Number(res.headers['retry-after']) > 0, `Retry-After: ${res.headers['retry-after']}`);
  t.ok(Date.now() - startedAt < limitMs, `answered after ${Date.now() - startedAt} ms`);
}

t.test('PostgreSQL unreachable: 503 with Retry-After within seconds, logged once per outage', async (t) => {
  const down = `postgres://postgres@127.0.0.1:${await freePort()}/postgres`;
  const server = await startLoggedServer(t, down, { DB_TIMEOUT_MS: '2000' });
  for (let i = 0; i < 5; i++) {
    const started = Date.now();
    assertUnavailable(t, await call(server.url, PATH), started, 3000);
  }
  const lines = server.logs.filter((l) => l.msg === 'database unavailable: answering 503 until it is back');
  t.equal(lines.length, 1, 'one log line for the outage, not one per request');
  t.notOk(JSON.stringify(server.logs).includes('kbx_u1'), 'the key is not logged');
});

t.test(
  'the rate-limit store unreachable: 503 (fail closed, never an open door), logged once, nothing printed outside the log',
  async (t) => {
    const printed: string[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void printed.push(args.map(String).join(' '));
    t.teardown(() => {
      console.error = original;
    });
    const server = await startLoggedServer(t, db.url, { REDIS_URL: `redis://127.0.0.1:${await freePort()}` });
    for (let i = 0; i < 5; i++) {
      const started = Date.now();
      assertUnavailable(t, await call(server.url, PATH), started, 3000);
    }
    const lines = server.logs.filter((l) => l.msg === 'redis unavailable: answering 503 until it is back');
    t.equal(lines.length, 1, 'one log line for the outage');
    t.same(
      printed.filter((p) => /ioredis/i.test(p)),
      [],
      'ioredis printed nothing outside the JSON log',
    );
  },
);

t.test(
  'an export that would wait on a lock (a schema change in progress): 503 within DB_TIMEOUT_MS (D8.5, D8.7)',
  async (t) => {
    const server = await startLoggedServer(t, db.url, { DB_TIMEOUT_MS: '700', EXPORT_CACHE_BYTES: '0' });
    const unlock = await lockDocuments(t, db.sql);
    const started = Date.now();
    assertUnavailable(t, await call(server.url, PATH), started, 3000);
    await unlock();
    const after = await call(server.url, PATH);
    t.equal(after.status, 200, 'served once the lock is gone');
    t.equal(after.json?.meta?.count, 1);
    const left =
      await db.sql`SELECT 1 FROM pg_stat_activity WHERE datname = ${db.name} AND application_name = 'kbx-test-export' AND state <> 'idle'`;
    t.equal(left.length, 0, 'no export session left waiting');
  },
);

t.test(
  'a frozen database link: key lookups answer 503 within DB_TIMEOUT_MS, and the server serves again once it thaws (D8.5)',
  async (t) => {
    const proxy = await startTcpProxy(t, targetOf(db.url));
    // Long enough for a first connection through the proxy on a loaded machine, which is not the outage.
    const server = await startLoggedServer(t, proxy.urlFor(db.url), { DB_TIMEOUT_MS: '2000', EXPORT_CACHE_BYTES: '0' });
    t.equal((await call(server.url, PATH)).status, 200, 'served through the proxy');
    proxy.stall();
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      assertUnavailable(t, await call(server.url, PATH), started, 3700);
    }
    proxy.resume();
    let after = await call(server.url, PATH);
    for (let i = 0; i < 20 && after.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 250));
      after = await call(server.url, PATH);
    }
    t.equal(after.status, 200, 'served again after the thaw');
    t.equal(after.json?.meta?.count, 1);
    t.equal(
      server.logs.filter((l) => l.msg === 'database unavailable: answering 503 until it is back').length,
      1,
      'the outage was logged once',
    );
    t.ok(
      server.logs.some((l) => l.msg === 'database available again'),
      'and its end',
    );
  },
);

// A real Redis is there when the suite runs with REDIS_URL (CI's system-server suite); a fresh
// machine has none, and the refused-port test above covers the outage there.
const redisUrl = process.env.REDIS_URL;
if (redisUrl)
  t.test(
    'Redis cut through a proxy while serving: 503 at once, then served again when it is back (D8.5)',
    async (t) => {
      const redis = new URL(redisUrl);
      const proxy = await startTcpProxy(t, { host: redis.hostname, port: Number(redis.port || 6379) });
      const server = await startLoggedServer(t, db.url, { REDIS_URL: `redis://127.0.0.1:${proxy.port}` });
      t.equal((await call(server.url, PATH)).status, 200, 'served with the Redis-backed limit');
      proxy.refuse(true);
      proxy.cutAll();
      for (let i = 0; i < 3; i++) {
        const started = Date.now();
        assertUnavailable(t, await call(server.url, PATH), started, 2500);
      }
      proxy.refuse(false);
      let after = await call(server.url, PATH);
      for (let i = 0; i < 40 && after.status !== 200; i++) {
        await new Promise((r) => setTimeout(r, 250));
        after = await call(server.url, PATH);
      }
      t.equal(after.status, 200, 'served again once Redis is reachable');
      t.equal(
        server.logs.filter((l) => l.msg === 'redis unavailable: answering 503 until it is back').length,
        1,
        'logged once',
      );
    },
  );
