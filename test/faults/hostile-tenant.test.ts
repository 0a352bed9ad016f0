/**
 * A hostile tenant against the real server, a child process whose peak RSS (VmHWM) is read from
 * /proc, with `/livez` polled from a worker thread and another user exporting meanwhile
 * (decisions.md D8.8, D8.9):
 * - a document of nothing but media tags (2 MB and 8 MB of `<img src=a>`): rewritten off the event
 *   loop or in slices, in memory that grows with its size, not with its 180,000-730,000 URLs;
 * - a burst of compressed exports served from the export cache: compressed as they are written,
 *   one user's cap holding.
 */
import t, { type Test } from 'tap';
import { slowReader } from '../helpers/clients.js';
import { request } from 'undici';
import { startServer as startServerProcess, type ServerProcess } from '../../bench/lib/server-process.js';
import { redisKeyPrefix, seedSizedBook } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { pollLivez } from '../helpers/livez-poller.js';

const MB = 1024 * 1024;
const TAG = '<img src=a>';
/** decisions.md D8.8: what `/livez` must answer within while a tenant's document is processed. */
const LIVEZ_MS = 250;

/**
 * Runs a measured scenario once more when its `/livez` worst case misses `LIVEZ_MS`, and returns the
 * second run: one outlier of a shared, noisy machine (another process holding both cores for a
 * moment) is not the service stalling, which shows as the same miss twice. The first miss is
 * reported as a comment.
 */
async function measured<R extends { worst: number }>(t: Test, run: () => Promise<R>): Promise<R> {
  const first = await run();
  if (first.worst < LIVEZ_MS) return first;
  t.comment(`/livez waited ${Math.round(first.worst)} ms in a first run; measuring once more`);
  return run();
}

/** The server's longest event loop delay since the last scrape, ms (nodejs_eventloop_lag_max_seconds). */
async function loopLagMs(base: string): Promise<number> {
  const text = await (await request(`${base}/metrics`)).body.text();
  return 1000 * Number(/^nodejs_eventloop_lag_max_seconds ([\d.e+-]+)/m.exec(text)?.[1] ?? NaN);
}

/** Reads an export whole; its status, byte count and the body's last bytes. */
async function exportOf(base: string, key: string, headers: Record<string, string> = {}) {
  const res = await request(`${base}/api/v1/open/books/kb/docs`, {
    headers: { authorization: `Bearer ${key}`, ...headers },
  });
  let bytes = 0;
  let head = '';
  let tail = Buffer.alloc(0);
  for await (const chunk of res.body) {
    const c = chunk as Buffer;
    if (head.length < 1000) head += c.toString('latin1', 0, Math.min(c.length, 1000));
    bytes += c.length;
    tail = Buffer.concat([tail, c]).subarray(-80);
  }
  return { status: res.statusCode, headers: res.headers, bytes, head, tail: tail.toString('latin1') };
}

/** Users of the media-tag tests: `tags<mb>` owns one document of `mb` MB of media tags. */
const tagsUser = (mb: number) => `tags${mb}`;

// One database for the file: every test reads it through a server process of its own. `other`
// owns an ordinary `kb`; each media-tag test has a user of its own, and so do the cached exports
// (4 KB of hex text a document).
const db = await createTestDatabase(t);
await seedSizedBook(db.sql, 'other', 2000, { content_str: `repeat('x', 400)` });
for (const mb of [2, 8])
  await seedSizedBook(db.sql, tagsUser(mb), 1, {
    content_html: `repeat('${TAG}', ${Math.floor((mb * MB) / TAG.length)})`,
  });
const HEX = `(SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 128) g)`;
// 12 MB of body: more than the socket buffers of a client that reads 1 KB/s can swallow.
await seedSizedBook(db.sql, 'capped', 3000, { content_str: HEX });
// 1 MB bodies: compression runs off the event loop chunk by chunk whatever a body's size, so 40 MB
// in one burst is as much of a test of /livez as 120 MB, at a third of the CPU.
const BURST_USERS = ['b1', 'b2', 'b3', 'b4', 'b5'];
for (const user of BURST_USERS) await seedSizedBook(db.sql, user, 250, { content_str: HEX });

/**
 * A server of its own fleet (REDIS_KEY_PREFIX): leases a stopped server of an earlier test left in
 * Redis until their TTL cannot count against this one's users.
 */
async function server(t: Test, env: Record<string, string> = {}): Promise<ServerProcess> {
  const s = await startServerProcess({
    databaseUrl: db.url,
    coverage: false,
    env: { EXPORT_PER_USER_MAX: '4', REDIS_KEY_PREFIX: redisKeyPrefix(), ...env },
  });
  t.teardown(() => s.stop());
  return s;
}

for (const mb of [2, 8]) {
  t.test(
    `a document of ${mb} MB of media tags: /livez under ${LIVEZ_MS} ms, another export whole, memory by size (D8.8)`,
    async (t) => {
      const { hostile, other, worst, polls, lag, peak, atRest } = await measured(t, async () => {
        // Cache and stored plans off: the point is the rewriting, every time. A second run gets a
        // server of its own, as its memory is measured from rest.
        const s = await server(t, { EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false' });
        await s.resetPeak();
        const atRest = await s.peakRss();
        await loopLagMs(s.base);
        const livez = pollLivez(s.base);
        const [hostile, other] = await Promise.all([
          exportOf(s.base, `kbx_${tagsUser(mb)}`),
          exportOf(s.base, 'kbx_other'),
        ]);
        const { worst, polls } = await livez.stop();
        return { hostile, other, worst, polls, lag: await loopLagMs(s.base), peak: await s.peakRss(), atRest };
      });

      const tags = Math.floor((mb * MB) / TAG.length);
      t.equal(hostile.status, 200);
      t.match(hostile.tail, /\],"meta":\{"count":1\}\}$/, 'the hostile export is whole');
      t.equal(
        hostile.bytes > tags * '<img src=/media/a>'.length,
        true,
        `every URL rewritten (${(hostile.bytes / MB).toFixed(1)} MB)`,
      );
      t.match(hostile.head, /"contentHtml":"<img src=\/media\/a><img src=\/media\/a>/);
      t.equal(other.status, 200);
      t.match(other.tail, /\],"meta":\{"count":2000\}\}$/, "the other user's export is whole");
      t.ok(worst < LIVEZ_MS, `/livez answered within ${Math.round(worst)} ms at worst over ${polls} polls`);
      t.ok(
        peak < 230 * MB,
        `peak RSS ${(peak / MB).toFixed(1)} MB (at rest ${(atRest / MB).toFixed(1)} MB) under 230 MB`,
      );
      t.comment(
        `${mb} MB of media tags: /livez worst ${Math.round(worst)} ms, event loop lag max ${Math.round(lag)} ms, peak RSS ${(peak / MB).toFixed(1)} MB, at rest ${(atRest / MB).toFixed(1)} MB`,
      );
    },
  );
}

t.test('cached exports are exports: the per-user cap holds for them (D8.9, D8.10)', async (t) => {
  const s = await server(t, { EXPORT_CACHE_BYTES: String(256 * MB), EXPORT_PER_USER_MAX: '4' });
  t.equal((await exportOf(s.base, 'kbx_capped')).status, 200, 'the first export fills the cache');
  const held = Array.from({ length: 4 }, () =>
    slowReader(`${s.base}/api/v1/open/books/kb/docs`, { authorization: 'Bearer kbx_capped' }, 1024),
  );
  t.teardown(() => held.forEach((r) => r.abort()));
  for (let i = 0; i < 200 && held.some((r) => r.peek().status === 0); i++) await new Promise((r) => setTimeout(r, 25));
  t.same(
    held.map((r) => r.peek().status),
    [200, 200, 200, 200],
    'four cached exports stream to slow readers',
  );
  const fifth = await request(`${s.base}/api/v1/open/books/kb/docs`, {
    headers: { authorization: 'Bearer kbx_capped' },
  });
  t.equal(fifth.statusCode, 429, 'the fifth is refused: the cap counts exports served from the cache');
  t.ok(fifth.headers['retry-after'], 'with Retry-After');
  await fifth.body.dump();
  const metrics = await (await request(`${s.base}/metrics`)).body.text();
  t.equal(Number(/^kb_export_cache_hits_total (\d+)/m.exec(metrics)?.[1]), 4, 'the four held ones are cache hits');
});

t.test(`a burst of 40 compressed cache hits: /livez under ${LIVEZ_MS} ms, every body whole (D8.9)`, async (t) => {
  const users = BURST_USERS;
  const s = await server(t, { EXPORT_CACHE_BYTES: String(256 * MB), EXPORT_PER_USER_MAX: '8' });
  for (const user of users)
    t.equal((await exportOf(s.base, `kbx_${user}`)).status, 200, `${user}'s export fills the cache`);
  const { burst, worst, polls, lag } = await measured(t, async () => {
    await loopLagMs(s.base);
    const livez = pollLivez(s.base);
    const burst = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        exportOf(s.base, `kbx_${users[i % users.length]}`, { 'accept-encoding': i % 2 ? 'gzip' : 'br' }),
      ),
    );
    const { worst, polls } = await livez.stop();
    return { burst, worst, polls, lag: await loopLagMs(s.base) };
  });
  t.same(
    burst.map((r) => r.status),
    burst.map(() => 200),
    'all 40 served',
  );
  t.ok(
    burst.every((r) => r.headers['content-encoding'] === 'gzip' || r.headers['content-encoding'] === 'br'),
    'compressed',
  );
  t.ok(worst < LIVEZ_MS, `/livez answered within ${Math.round(worst)} ms at worst over ${polls} polls`);
  t.comment(`40 compressed cache hits: /livez worst ${Math.round(worst)} ms, event loop lag max ${Math.round(lag)} ms`);
});
