/**
 * The per-user cap across two real `kb-export serve` processes on one Redis (decisions.md D11.1,
 * D8.2): with EXPORT_PER_USER_MAX=1, a user streaming on one instance is refused 429 on the other
 * (renewals past the TTL: test/export/admission/user-leases.test.ts); once the first instance is
 * killed with SIGKILL its lease expires and the other serves the user within seconds. A lease
 * removed from Redis while its export streams, fresh or cached, aborts that export (cause
 * lease_lost); Redis out of reach refuses exports with 503 and Retry-After (D8.5, fails closed). Needs Redis
 * (REDIS_URL) and a PostgreSQL server (DATABASE_URL, which `npm test` always sets); skipped without.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { redisKeyPrefix, seed, simpleSeed, startServer } from '../../helpers/app.js';
import { slowReader } from '../../helpers/clients.js';
import { createTestDatabase } from '../../helpers/db.js';
import { call } from '../../helpers/http.js';
import { startTcpProxy, targetOf } from '../../helpers/tcp-proxy.js';
import { untracked } from '../../../bench/lib/untracked.js';
import { CLI, ROOT } from '../../helpers/paths.js';

const MB = 1024 * 1024;
/** user-leases.ts's lease TTL, ms. */
const LEASE_TTL_MS = 10_000;
/** The fleet's REDIS_KEY_PREFIX: every instance of this file's tests is one fleet. */
const PREFIX = redisKeyPrefix();
const missing = !process.env.REDIS_URL ? 'REDIS_URL' : !process.env.DATABASE_URL ? 'DATABASE_URL' : null;
const needs = { skip: missing ? `${missing} is not set: no shared Redis or server to run instances on` : false };

/** A test database where a user of this run only (other runs may share the Redis) owns `kb`: 8 documents of 2 MB. */
async function database(t: Parameters<typeof createTestDatabase>[0]) {
  const db = await createTestDatabase(t);
  const user = `fleet${randomBytes(4).toString('hex')}`;
  await seed(db.sql, simpleSeed([], { user }));
  await db.sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
    SELECT 'l' || i, 'b-${user}', 'l' || i, 'Large ' || i, 'document', 'a' || i, 1, repeat('text of a large page ', ${Math.floor((2 * MB) / 21)})
    FROM generate_series(1, 8) i`);
  return { db, user, auth: `Bearer kbx_${user}` };
}

interface Served {
  child: ChildProcess;
  base: Promise<string>;
  exited: Promise<unknown>;
}

function serve(env: Record<string, string>): Served {
  const inherited: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(DATABASE_|KB_|PORT|HOST|LOG_LEVEL|REDIS_URL|EXPORT_|REPLICA_)/.test(k)) inherited[k] = v;
  }
  const [command, argv] = untracked([CLI, 'serve']);
  const child = spawn(command, argv, { cwd: ROOT, env: { ...inherited, PORT: '0', HOST: '127.0.0.1', ...env } });
  let out = '';
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const base = new Promise<string>((resolve, reject) => {
    const seen = () => {
      const m = /listening at (http:\/\/[0-9.]+:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    };
    child.stdout!.on('data', (d) => ((out += d), seen()));
    child.stderr!.on('data', (d) => (out += d));
    void exited.then(() => reject(new Error(`serve exited before listening:\n${out.slice(-2000)}`)));
    setTimeout(() => reject(new Error(`serve did not listen within 20 s:\n${out.slice(-2000)}`)), 20_000).unref();
  });
  base.catch(() => {});
  return { child, base, exited };
}

t.test(
  'two instances share EXPORT_PER_USER_MAX; a killed one gives its share back within seconds',
  needs,
  async (t) => {
    const { db, user } = await database(t);
    const env = {
      DATABASE_URL: db.url,
      REDIS_URL: process.env.REDIS_URL!,
      REDIS_KEY_PREFIX: PREFIX,
      EXPORT_PER_USER_MAX: '1',
      EXPORT_CACHE_BYTES: '0',
      MIN_DRAIN_BYTES_PER_S: '0',
      RATE_LIMIT_MAX: '100000',
      // Fastify's "listening at" line is at info.
      LOG_LEVEL: 'info',
    };
    const [a, b] = [serve(env), serve(env)];
    t.teardown(() => {
      a.child.kill('SIGKILL');
      b.child.kill('SIGKILL');
    });
    const [baseA, baseB] = await Promise.all([a.base, b.base]);
    const auth = `Bearer kbx_${user}`;
    const url = '/api/v1/open/books/kb/docs';

    const reader = slowReader(baseA + url, { authorization: auth }, 64 * 1024);
    t.teardown(() => reader.abort());
    const deadline = Date.now() + 10_000;
    while (reader.peek().status !== 200 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    t.equal(reader.peek().status, 200, 'the user streams on instance A');

    const refused = await call(baseB, url, { auth });
    t.equal(refused.status, 429, 'instance B refuses the same user');
    t.equal(refused.json?.code, 'RATE_LIMITED');
    t.ok(Number(refused.headers['retry-after']) > 0, 'with Retry-After');

    a.child.kill('SIGKILL');
    await a.exited;
    const killedAt = Date.now();
    let served = 0;
    const other: number[] = [];
    while (Date.now() - killedAt < LEASE_TTL_MS + 5000) {
      const res = await call(baseB, url, { auth });
      if (res.status === 200) {
        served = Date.now() - killedAt;
        t.match(res.text.slice(-40), /"meta":\{"count":8\}\}$/, 'the whole export');
        break;
      }
      if (res.status !== 429) other.push(res.status);
      await new Promise((r) => setTimeout(r, 250));
    }
    t.same(other, [], "only 429 while the dead instance's lease lives");
    t.ok(served > 0 && served <= LEASE_TTL_MS + 2000, `served by B ${(served / 1000).toFixed(1)} s after A was killed`);
    t.equal((await call(baseB, url, { auth })).status, 200, 'the lease of a finished export was given back');
  },
);

/**
 * `kb` to a reader of 64 KB/s; once its body streams (and `streaming` has asserted what it asks),
 * the user's lease is removed from Redis: the export must fail with cause lease_lost and the body
 * must end without its terminating chunk. `say` holds the messages of the three steps.
 */
async function loseLeaseWhileStreaming(
  t: Test,
  base: string,
  user: string,
  auth: string,
  say: { streams: string; removed: string; failed: (ms: number) => string },
  streaming: () => Promise<void> = async () => {},
): Promise<void> {
  const reader = slowReader(`${base}/api/v1/open/books/kb/docs`, { authorization: auth }, 64 * 1024);
  t.teardown(() => reader.abort());
  for (const until = Date.now() + 10_000; reader.peek().status !== 200 && Date.now() < until;)
    await new Promise((r) => setTimeout(r, 50));
  t.equal(reader.peek().status, 200, say.streams);
  await streaming();
  const redis = new Redis(process.env.REDIS_URL!);
  t.teardown(() => redis.disconnect());
  t.equal(await redis.del(`semaphore:${PREFIX}-exports:${user}`), 1, say.removed);
  const started = Date.now();
  // The client's own buffers hold megabytes it has not read yet: the server's side tells when.
  const failed = async () =>
    /kb_export_export_failures_total\{cause="lease_lost"\} 1\b/.test(
      (await call(base, '/metrics', { auth: null })).text,
    );
  while (!(await failed()) && Date.now() - started < LEASE_TTL_MS) await new Promise((r) => setTimeout(r, 100));
  t.ok(await failed(), say.failed(Date.now() - started));
  reader.setRate(Infinity);
  const res = await reader.done;
  t.notOk(res.complete, 'the body never got its terminating chunk (D6.3)');
}

t.test(
  'a lease removed from Redis while its export streams aborts the export, counted as lease_lost',
  needs,
  async (t) => {
    const { db, user, auth } = await database(t);
    const env = {
      REDIS_URL: process.env.REDIS_URL!,
      REDIS_KEY_PREFIX: PREFIX,
      EXPORT_PER_USER_MAX: '1',
      EXPORT_CACHE_BYTES: '0',
      MIN_DRAIN_BYTES_PER_S: '0',
    };
    const server = await startServer(t, env, db);
    await loseLeaseWhileStreaming(t, server.url, user, auth, {
      streams: 'the export streams',
      removed: "the user's lease was in Redis (redis-semaphore's key), and is removed",
      failed: (ms) => `the export failed with cause lease_lost ${ms} ms later, within a renewal`,
    });
  },
);

t.test('a lease removed from Redis while a cached body streams aborts it too (D8.10)', needs, async (t) => {
  const { db, user, auth } = await database(t);
  const env = {
    REDIS_URL: process.env.REDIS_URL!,
    REDIS_KEY_PREFIX: PREFIX,
    EXPORT_PER_USER_MAX: '1',
    EXPORT_CACHE_BYTES: String(128 * MB),
    MIN_DRAIN_BYTES_PER_S: '0',
  };
  const server = await startServer(t, env, db);
  t.equal(
    (await call(server.url, '/api/v1/open/books/kb/docs', { auth })).status,
    200,
    'a first export fills the cache',
  );
  const hits = async () =>
    Number(/kb_export_cache_hits_total (\d+)/.exec((await call(server.url, '/metrics', { auth: null })).text)?.[1]);
  const say = {
    streams: 'the cached body streams',
    removed: "the user's lease is removed from Redis",
    failed: (ms: number) => `the cached export failed with cause lease_lost ${ms} ms later`,
  };
  await loseLeaseWhileStreaming(t, server.url, user, auth, say, async () => {
    t.equal(await hits(), 1, 'from the export cache');
  });
});

t.test('REDIS_KEY_PREFIX draws the fleet: one Redis, two prefixes, a cap each', needs, async (t) => {
  const { db, auth } = await database(t);
  const env = {
    REDIS_URL: process.env.REDIS_URL!,
    EXPORT_PER_USER_MAX: '1',
    EXPORT_CACHE_BYTES: '0',
    MIN_DRAIN_BYTES_PER_S: '0',
  };
  const a = await startServer(t, { ...env, REDIS_KEY_PREFIX: `${PREFIX}-a` }, db);
  const reader = slowReader(`${a.url}/api/v1/open/books/kb/docs`, { authorization: auth }, 64 * 1024);
  t.teardown(() => reader.abort());
  for (const until = Date.now() + 10_000; reader.peek().status !== 200 && Date.now() < until;)
    await new Promise((r) => setTimeout(r, 50));
  t.equal(reader.peek().status, 200, 'the user streams on an instance of fleet a');
  const sameFleet = await startServer(t, { ...env, REDIS_KEY_PREFIX: `${PREFIX}-a` }, db);
  t.equal(
    (await call(sameFleet.url, '/api/v1/open/books/kb/docs', { auth })).status,
    429,
    'another instance of fleet a counts that export',
  );
  const otherFleet = await startServer(t, { ...env, REDIS_KEY_PREFIX: `${PREFIX}-b` }, db);
  const res = await call(otherFleet.url, '/api/v1/open/books/kb/docs', { auth });
  t.equal(res.status, 200, 'an instance of fleet b, on the same Redis, does not');
  t.match(res.text.slice(-40), /"meta":\{"count":8\}\}$/, 'the whole export');
});

t.test('Redis out of reach: exports are refused with 503 and Retry-After, not let through', needs, async (t) => {
  const { db, auth } = await database(t);
  const proxy = await startTcpProxy(t, targetOf(process.env.REDIS_URL!));
  const server = await startServer(
    t,
    { REDIS_URL: proxy.urlFor(process.env.REDIS_URL!), EXPORT_PER_USER_MAX: '1' },
    db,
  );
  t.equal(
    (await call(server.url, '/api/v1/open/books/kb/docs', { auth: null, headers: { authorization: auth } })).status,
    200,
    'served while Redis answers',
  );
  proxy.refuse(true);
  proxy.cutAll();
  const res = await call(server.url, '/api/v1/open/books/kb/docs', { auth: null, headers: { authorization: auth } });
  t.equal(res.status, 503);
  t.same(res.json, { success: false, code: 'SERVICE_UNAVAILABLE', message: res.json?.message }, 'in the API envelope');
  t.ok(Number(res.headers['retry-after']) > 0, 'with Retry-After');
});
