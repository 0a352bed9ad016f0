/**
 * Overload over real sockets (decisions.md D8.1, D8.2, D6.4): exports that hold every slot, a
 * bounded queue with a timeout, a per-user cap, and clients that leave while looked up or queued.
 * A slot is held by a client that asks for a 20 MB export and reads nothing.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { call } from '../../helpers/http.js';
import { doc, seed, seedSizedBook, simpleSeed } from '../../helpers/app.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js';
import { startLoggedServer, type LoggedServer } from '../../helpers/logged-app.js';

const PATH = '/api/v1/open/books/kb/docs';

/**
 * Users u1..u3, each with key kbx_<user> and a knowledge base `kb`; u1's holds ~20 MB, built in
 * PostgreSQL: the size is what holds a slot, and the loader has tests of its own.
 */
async function seedUsers(db: TestDatabase): Promise<void> {
  await seedSizedBook(db.sql, 'u1', 2000, { content_str: `repeat('x', 10000)` });
  for (const u of ['u2', 'u3']) await seed(db.sql, simpleSeed([doc(`${u}-0`, 'a0')], { user: u }));
}

// One database for the file: every test reads it, starts a server of its own, and gives back the
// one lock it takes.
const db = await createTestDatabase(t);
await seedUsers(db);

/** A client that sends the export request and reads nothing: it holds a slot while the server waits for it. */
async function nonReader(server: LoggedServer, user: string): Promise<net.Socket> {
  const url = new URL(server.url);
  const socket = net.connect(Number(url.port), url.hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(`GET ${PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_${user}\r\n\r\n`);
  socket.pause();
  return socket;
}

async function until(what: string, check: () => boolean | Promise<boolean>, limitMs = 5000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Exports waiting in the server's export queue now (kb_export_exports_waiting). */
async function waiting(server: LoggedServer): Promise<number> {
  const metric = await server.app.metrics.registry.getSingleMetric('kb_export_exports_waiting')!.get();
  return metric.values[0]?.value ?? 0;
}

const auth = (user: string) => `Bearer kbx_${user}`;

t.test(
  'queue full: 503 at once; a queued request that waits too long: 503; both with Retry-After (D8.1)',
  async (t) => {
    const server = await startLoggedServer(t, db.url, {
      EXPORT_CONCURRENCY: '1',
      EXPORT_QUEUE_MAX: '1',
      EXPORT_QUEUE_TIMEOUT_MS: '600',
      STALL_TIMEOUT_MS: '20000',
    });
    const holder = await nonReader(server, 'u1');
    t.teardown(() => holder.destroy());
    await until('the holder to stream', () => server.begun() === 1);

    const queued = call(server.url, PATH, { auth: auth('u2') });
    await until('the request to queue', async () => (await waiting(server)) === 1);
    const started = Date.now();
    const full = await call(server.url, PATH, { auth: auth('u3') });
    t.equal(full.status, 503, 'the queue is full');
    t.equal(full.json?.code, 'SERVICE_UNAVAILABLE');
    t.equal(full.json?.success, false);
    t.ok(Number(full.headers['retry-after']) > 0, `Retry-After: ${full.headers['retry-after']}`);
    t.ok(Date.now() - started < 400, 'refused at once, not after the queue timeout');

    const timedOut = await queued;
    t.equal(timedOut.status, 503, 'the queued request timed out');
    t.equal(timedOut.json?.code, 'SERVICE_UNAVAILABLE');
    t.ok(Number(timedOut.headers['retry-after']) > 0);
    t.equal(server.begun(), 1, 'neither refused request reached the database');
  },
);

t.test(
  "per-user cap: the same user's next export is 429 RATE_LIMITED with Retry-After; others go on (D8.2)",
  async (t) => {
    const server = await startLoggedServer(t, db.url, {
      EXPORT_CONCURRENCY: '2',
      EXPORT_PER_USER_MAX: '1',
      STALL_TIMEOUT_MS: '20000',
    });
    const holder = await nonReader(server, 'u1');
    t.teardown(() => holder.destroy());
    await until('the holder to stream', () => server.begun() === 1);
    const again = await call(server.url, PATH, { auth: auth('u1') });
    t.equal(again.status, 429);
    t.equal(again.json?.code, 'RATE_LIMITED');
    t.ok(Number(again.headers['retry-after']) > 0, `Retry-After: ${again.headers['retry-after']}`);
    const other = await call(server.url, PATH, { auth: auth('u2') });
    t.equal(other.status, 200, 'another user is served');
    t.equal(other.json?.meta?.count, 1);
    holder.destroy();
    await until('the slot to free', () =>
      server.logs.some((l) => l.msg === 'export ended' && l.outcome === 'client_gone'),
    );
    const after = await call(server.url, PATH, { auth: auth('u1'), headers: { 'x-no': '1' } });
    t.equal(after.status, 200, 'the cap counts only running exports');
  },
);

t.test('a client that leaves the queue never reaches the database; the slot goes to the next one (D8.1)', async (t) => {
  const server = await startLoggedServer(t, db.url, {
    EXPORT_CONCURRENCY: '1',
    EXPORT_QUEUE_TIMEOUT_MS: '20000',
    STALL_TIMEOUT_MS: '20000',
  });
  const holder = await nonReader(server, 'u1');
  await until('the holder to stream', () => server.begun() === 1);
  const leaver = await nonReader(server, 'u2');
  await until('the leaver to be looked up and queued', async () => (await waiting(server)) === 1);
  leaver.destroy();
  const waiter = call(server.url, PATH, { auth: auth('u3') });
  await sleep(100);
  holder.destroy();
  const res = await waiter;
  t.equal(res.status, 200, 'the request behind the leaver is served');
  t.equal(res.json?.meta?.count, 1);
  t.equal(server.begun(), 2, 'only the holder and the served request began a snapshot');
  await until('the leaver to be logged', () =>
    server.logs.some((l) => l.msg === 'client went away before its export started'),
  );
  t.pass('the leaver was seen leaving');
});

/** Holds an ACCESS EXCLUSIVE lock on api_keys until `release` is called: key lookups wait on it. */
async function lockKeys(db: TestDatabase): Promise<{ release: () => Promise<void> }> {
  const reserved = await db.sql.reserve();
  await reserved`BEGIN`;
  await reserved`LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE`;
  return {
    release: async () => {
      await reserved`COMMIT`;
      reserved.release();
    },
  };
}

/** Whether a session waits on a lock in `db` (the key lookup behind lockKeys). */
async function lockWaiter(db: TestDatabase): Promise<boolean> {
  return (
    (await db.sql`SELECT 1 FROM pg_stat_activity WHERE datname = ${db.name} AND wait_event_type = 'Lock'`).length > 0
  );
}

for (const how of ['close', 'half-close'] as const) {
  t.test(
    `a client that ${how}s during its key lookup frees its place at once and never reaches the database (D6.4)`,
    async (t) => {
      const server = await startLoggedServer(t, db.url, {
        EXPORT_CONCURRENCY: '1',
        EXPORT_QUEUE_MAX: '0',
        STALL_TIMEOUT_MS: '60000',
      });
      const lock = await lockKeys(db);
      const early = await nonReader(server, 'u2');
      await until('the lookup to wait on the lock', () => lockWaiter(db));
      if (how === 'close') early.destroy();
      else early.end();
      await sleep(100);
      await lock.release();
      await sleep(200);
      const started = Date.now();
      const next = await call(server.url, PATH, { auth: auth('u3') });
      t.equal(next.status, 200, 'the only export slot is free: served, not 503 (the queue holds none)');
      t.ok(Date.now() - started < 2000, `served after ${Date.now() - started} ms`);
      t.equal(server.begun(), 1, 'the early client began no snapshot');
      early.destroy();
    },
  );
}
