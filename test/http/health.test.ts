/**
 * `/livez` and `/readyz` over a real socket (decisions.md D10.1, D10.2): no key, not rate limited;
 * readiness follows the database through a TCP proxy the test cuts and restores, from a cached
 * check (a burst of probes sends nothing to PostgreSQL). SIGTERM's readiness is in test/server.test.ts.
 */
import path from 'node:path';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { call } from '../helpers/http.js';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { startLoggedServer } from '../helpers/logged-app.js';
import { startTcpProxy, targetOf } from '../helpers/tcp-proxy.js';
import { untracked } from '../../bench/lib/untracked.js';
import { ROOT } from '../helpers/paths.js';

// One database for the file: the tests only read it, each through a server (and proxy) of its own.
const db = await createTestDatabase(t);
await seed(db.sql, simpleSeed([doc('d1', 'a0')]));

/** A probe as a load balancer sends it: no key. */
const probe = (base: string, path: string, method = 'GET') => call(base, path, { auth: null, method });

/** Polls /readyz until its status is `want`; returns the last answer. */
async function readyzUntil(base: string, want: number, ms: number) {
  const end = Date.now() + ms;
  let res = await probe(base, '/readyz');
  while (res.status !== want && Date.now() < end) {
    await sleep(200);
    res = await probe(base, '/readyz');
  }
  return res;
}

t.test('/livez and /readyz: 200 with no key, never rate limited, HEAD too, other methods 405', async (t) => {
  const server = await startServer(t, { RATE_LIMIT_MAX: '1' }, db);
  for (let i = 0; i < 5; i++) {
    const live = await probe(server.url, '/livez');
    t.equal(live.status, 200);
    t.same(live.json, { status: 'ok' });
    const ready = await probe(server.url, '/readyz');
    t.equal(ready.status, 200);
    t.same(ready.json, { status: 'ready' });
    t.notOk(ready.headers['x-ratelimit-limit'], 'outside the rate limit');
  }
  t.equal((await probe(server.url, '/readyz', 'HEAD')).status, 200, 'HEAD /readyz');
  const post = await probe(server.url, '/livez', 'POST');
  t.equal(post.status, 405);
  t.equal(post.headers.allow, 'GET, HEAD');
});

t.test(
  '/readyz turns 503 when the database stops answering, and 200 again when it is back; probes cost no query',
  async (t) => {
    const proxy = await startTcpProxy(t, targetOf(db.url));
    const server = await startLoggedServer(t, proxy.urlFor(db.url), { DB_TIMEOUT_MS: '800' });
    t.equal((await probe(server.url, '/readyz')).status, 200, 'ready through the proxy');

    const before = proxy.stats().bytesToUpstream;
    const burst = await Promise.all(Array.from({ length: 200 }, () => probe(server.url, '/readyz')));
    const sent = proxy.stats().bytesToUpstream - before;
    t.ok(
      burst.every((r) => r.status === 200),
      '200 probes answered',
    );
    // One SELECT is some 50 bytes upstream: 200 of them would be 10 KB; the background check sends a few.
    t.ok(sent < 1000, `200 probes sent ${sent} bytes to PostgreSQL`);

    proxy.stall();
    const down = await readyzUntil(server.url, 503, 10_000);
    t.equal(down.status, 503, 'unready within seconds of the database going silent');
    t.equal(down.json?.status, 'unavailable');
    t.equal(down.json?.reason, 'database', 'the dependency in a word (D10.6)');
    t.notMatch(
      JSON.stringify(down.json),
      new RegExp(`${new URL(proxy.urlFor(db.url)).port}|127\\.0\\.0\\.1|postgres`),
      'no host, port or user name',
    );
    const logged = server.logs.filter((l) => l.msg === 'database unavailable: answering 503 until it is back');
    t.equal(logged.length, 1, 'the cause goes to the log, once');
    proxy.resume();
    const up = await readyzUntil(server.url, 200, 10_000);
    t.equal(up.status, 200, 'ready again once it answers');
  },
);

t.test("the Docker image's HEALTHCHECK command asks /readyz: exit 0 when ready, 1 when not", async (t) => {
  const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
  const cmd = JSON.parse(/HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])/.exec(dockerfile)![1]!) as string[];
  t.equal(cmd[0], 'node');
  const proxy = await startTcpProxy(t, targetOf(db.url));
  const server = await startLoggedServer(t, proxy.urlFor(db.url), { DB_TIMEOUT_MS: '800' });
  const run = () =>
    new Promise<number | null>((resolve) => {
      execFile(
        ...untracked([process.execPath, ...cmd.slice(1)]),
        { env: { ...process.env, PORT: new URL(server.url).port } },
        (err) => resolve(err ? ((err as { code?: number }).code ?? 1) : 0),
      );
    });
  t.equal(await run(), 0, 'ready: healthy');
  proxy.stall();
  await readyzUntil(server.url, 503, 10_000);
  t.equal(await run(), 1, 'the database silent: unhealthy');
  proxy.resume();
});
