/**
 * The fleet-wide per-user cap (decisions.md D11.1, D8.2, D8.5) on a real Redis: two lease holders
 * (two instances) share the cap, renewals keep a lease past its TTL, a `kill -9`ed holder's share
 * comes back within seconds, a lost lease is signalled, and an unreachable or frozen Redis fails
 * closed within the timeout. Redis is there when the suite runs with REDIS_URL (CI's system-server
 * suite); without it only the cases that need no Redis run, and the rest is skipped with that reason.
 */
import { DependencyError } from '../../../src/errors.js';
import { freePort } from '../../../src/db/free-port.js';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import {
  LeaseLostError,
  UserCapReachedError,
  UserLeases,
  type UserLease,
} from '../../../src/export/admission/user-leases.js';
import { redisKeyPrefix } from '../../helpers/app.js';
import { recordUnhandledRejections } from '../../helpers/crashes.js';
import { startTcpProxy } from '../../helpers/tcp-proxy.js';
import { ROOT } from '../../helpers/paths.js';

/** REDIS_KEY_PREFIX of this file's leases (users are unique to the run as well). */
const PREFIX = redisKeyPrefix();
const MODULE = pathToFileURL(path.join(ROOT, 'dist/src/export/admission/user-leases.js')).href;
const redisUrl = process.env.REDIS_URL;
const needsRedis = { skip: redisUrl ? false : 'REDIS_URL is not set: no Redis to share leases through' };
const TTL_MS = 1200;

/** Options as app.ts gives its client: no offline queue, short timeouts, no printing. */
const CLIENT_OPTIONS = {
  connectTimeout: 1000,
  commandTimeout: 1000,
  maxRetriesPerRequest: 1,
  enableOfflineQueue: false,
  retryStrategy: () => 200,
};

async function client(t: Test, url: string, ready = true): Promise<Redis> {
  const redis = new Redis(url, CLIENT_OPTIONS);
  redis.on('error', () => {});
  t.teardown(() => redis.disconnect());
  if (ready) await new Promise((resolve) => redis.once('ready', resolve));
  return redis;
}

interface Warning {
  obj: object;
  msg: string;
}

function leases(redis: Redis, perUserMax: number, warnings: Warning[] = []): UserLeases {
  return new UserLeases({
    redis,
    keyPrefix: PREFIX,
    perUserMax,
    timeoutMs: 1000,
    ttlMs: TTL_MS,
    log: { warn: (obj, msg) => void warnings.push({ obj, msg }) },
  });
}

/** A user id no other run sharing this Redis uses. */
const user = () => `u-${randomBytes(6).toString('hex')}`;
const never = new AbortController().signal;

async function refusal(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    (lease) => {
      void (lease as UserLease).release();
      return null;
    },
    (err: unknown) => err,
  );
}

t.test(
  'two instances, EXPORT_PER_USER_MAX=1: the second is refused with 429 until the first releases',
  needsRedis,
  async (t) => {
    const a = leases(await client(t, redisUrl!), 1);
    const b = leases(await client(t, redisUrl!), 1);
    const u = user();
    const held = await a.acquire(u, never);
    t.equal(a.held, 1);
    const err = await refusal(b.acquire(u, never));
    t.type(err, UserCapReachedError, 'the second instance is refused');
    t.match(
      err,
      { code: 'RATE_LIMITED', statusCode: 429, retryAfterS: 5 },
      'an ApiError the route answers as 429 with Retry-After',
    );
    const other = await b.acquire(user(), never);
    t.pass('another user is not limited');
    await held.release();
    await held.release();
    t.equal(a.held, 0, 'release is idempotent');
    const next = await b.acquire(u, never);
    t.pass('served once the first lease is given back');
    await Promise.all([next.release(), other.release()]);
  },
);

t.test('EXPORT_PER_USER_MAX=2 counts across instances', needsRedis, async (t) => {
  const u = user();
  const [a, b, c] = await Promise.all([1, 2, 3].map(async () => leases(await client(t, redisUrl!), 2)));
  const held = [await a!.acquire(u, never), await b!.acquire(u, never)];
  t.type(await refusal(c!.acquire(u, never)), UserCapReachedError);
  await Promise.all(held.map((l) => l.release()));
});

t.test(
  'a holder renews its lease while it streams; killed with SIGKILL, its share comes back within seconds',
  needsRedis,
  async (t) => {
    const u = user();
    const code = `
    import { Redis } from 'ioredis';
    import { UserLeases } from ${JSON.stringify(MODULE)};
    const redis = new Redis(${JSON.stringify(redisUrl)}, ${JSON.stringify(CLIENT_OPTIONS)});
    await new Promise((resolve) => redis.once('ready', resolve));
    const leases = new UserLeases({ redis, keyPrefix: ${JSON.stringify(PREFIX)}, perUserMax: 1, timeoutMs: 1000, ttlMs: ${TTL_MS}, log: { warn: () => {} } });
    await leases.acquire(${JSON.stringify(u)}, new AbortController().signal);
    process.stdout.write('held\\n');
    setInterval(() => {}, 1000);
  `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    t.teardown(() => {
      child.kill('SIGKILL');
      return exited;
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (c) => String(c).includes('held') && resolve());
      child.on('exit', (c) => reject(new Error(`the lease holder exited (${c}) before holding a lease`)));
    });
    const b = leases(await client(t, redisUrl!), 1);
    // Past two TTLs: only renewals keep the lease.
    await new Promise((resolve) => setTimeout(resolve, 2 * TTL_MS + 200));
    t.type(await refusal(b.acquire(u, never)), UserCapReachedError, 'still held after two TTLs: the holder renews it');

    child.kill('SIGKILL');
    await exited;
    const killedAt = Date.now();
    let lease: UserLease | null = null;
    while (lease === null && Date.now() - killedAt < 10_000) {
      lease = await b.acquire(u, never).catch(() => null);
      if (lease === null) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    t.ok(lease, 'the user is served again');
    const waited = Date.now() - killedAt;
    t.ok(waited < TTL_MS + 2000, `after ${waited} ms (TTL ${TTL_MS} ms)`);
    await lease?.release();
  },
);

t.test(
  'a lease removed from Redis while held: lease.lost aborts with LeaseLostError, logged once',
  needsRedis,
  async (t) => {
    const redis = await client(t, redisUrl!);
    const warnings: Warning[] = [];
    const a = leases(redis, 1, warnings);
    const u = user();
    const lease = await a.acquire(u, never);
    await redis.del(`semaphore:${PREFIX}-exports:${u}`);
    await new Promise((resolve) => lease.lost.addEventListener('abort', resolve, { once: true }));
    t.type(lease.lost.reason, LeaseLostError);
    t.equal(a.lost, 1);
    t.same(
      warnings.map((w) => w.msg),
      ['per-user export lease lost: it expired or was removed from Redis'],
    );
    t.match(warnings[0]!.obj, { userId: u });
    await lease.release();
    t.equal(a.held, 0);
  },
);

t.test(
  'Redis cut while a lease is held: renewals fail, the lease is reported lost after its TTL',
  needsRedis,
  async (t) => {
    const target = new URL(redisUrl!);
    const proxy = await startTcpProxy(t, { host: target.hostname, port: Number(target.port || 6379) });
    const warnings: Warning[] = [];
    const a = leases(await client(t, `redis://127.0.0.1:${proxy.port}`), 1, warnings);
    const rejections = recordUnhandledRejections(t);
    const lease = await a.acquire(user(), never);
    const cutAt = Date.now();
    proxy.refuse(true);
    proxy.cutAll();
    await new Promise((resolve) => lease.lost.addEventListener('abort', resolve, { once: true }));
    t.ok(Date.now() - cutAt >= TTL_MS - 100, `lost ${Date.now() - cutAt} ms after the cut, not before its TTL`);
    t.match(warnings[0]?.msg, /^per-user export lease lost: not renewed within/);
    await lease.release();
    t.match(
      warnings[1]?.msg,
      /not released: it expires by itself/,
      'a release Redis cannot take is logged, not thrown',
    );
    t.same(rejections, [], 'no failed renewal escaped as an unhandled rejection (which would end the server)');
  },
);

t.test(
  'Redis cut or frozen: acquire fails closed with a DependencyError within the timeout (D8.5)',
  needsRedis,
  async (t) => {
    const target = new URL(redisUrl!);
    const proxy = await startTcpProxy(t, { host: target.hostname, port: Number(target.port || 6379) });
    const a = leases(await client(t, `redis://127.0.0.1:${proxy.port}`), 1);
    const u = user();
    (await a.acquire(u, never)).release();

    proxy.stall();
    let started = Date.now();
    let err = await refusal(a.acquire(u, never));
    t.type(err, DependencyError, 'a frozen link');
    t.equal((err as DependencyError).dependency, 'redis');
    t.ok(Date.now() - started < 4000, `failed after ${Date.now() - started} ms`);

    proxy.resume();
    proxy.refuse(true);
    proxy.cutAll();
    started = Date.now();
    err = await refusal(a.acquire(u, never));
    t.type(err, DependencyError, 'a cut link');
    t.ok(Date.now() - started < 4000, `failed after ${Date.now() - started} ms`);
    t.equal(a.held, 0, 'nothing held');
  },
);

t.test('an aborted request never reaches Redis', async (t) => {
  // Nothing listens there: reaching it would be a DependencyError, not the abort's reason.
  const a = leases(await client(t, `redis://127.0.0.1:${await freePort()}`, false), 1);
  const gone = new AbortController();
  gone.abort(new Error('client gone'));
  await t.rejects(a.acquire(user(), gone.signal), /client gone/);
  t.equal(a.held, 0);
});

t.test('no Redis at the configured address: acquire fails closed at once with a DependencyError (D8.5)', async (t) => {
  const a = leases(await client(t, `redis://127.0.0.1:${await freePort()}`, false), 1);
  const started = Date.now();
  const err = await refusal(a.acquire(user(), never));
  t.type(err, DependencyError);
  t.match((err as Error).message, /^rate-limit store unavailable/);
  t.ok(Date.now() - started < 2000, `failed after ${Date.now() - started} ms`);
});
