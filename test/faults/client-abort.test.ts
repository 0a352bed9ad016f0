/**
 * Clients that hang up at random byte offsets of exports (decisions.md D6.4, D8.1): knowledge bases
 * of three sizes, with and without contentHtml, on servers with and without a rewrite worker, three
 * clients at a time (so one may hang up while it waits for an export slot). Each client saw a prefix
 * of the whole response; afterwards no export backend holds a snapshot or runs a query, both export
 * slots (EXPORT_CONCURRENCY=2) can be held at once again, and a server in a child process
 * (bench/lib/server-process.ts) is back near the RSS it had before the aborts.
 *
 * Replay a failure with FAULT_SEED=<seed printed in the assertion message>; FAULT_SCALE=4 soaks longer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { prng } from '../../src/generate/random.js';
import { startServer as startServerProcess } from '../../bench/lib/server-process.js';
import { startServer } from '../helpers/app.js';
import { abortAt, rawGet, slowReader, type AbortResult } from '../helpers/clients.js';
import { createTestDatabase } from '../helpers/db.js';
import { judgeExport } from '../helpers/export-check.js';
import { seedGeneratedBooks, type GeneratedBook } from '../helpers/generated-kb.js';
import { BUSY_STATES, waitForBackends, waitForNoBackends } from '../helpers/pg-activity.js';
import { SEED, faultRuns } from '../helpers/fault-runs.js';
import { isServing, recordUnhandledRejections } from '../helpers/crashes.js';

const ABORTS = faultRuns(24);
const PROCESS_ABORTS = faultRuns(18);
const AUTH = { authorization: 'Bearer kbx_u1' };
const MB = 1024 * 1024;
const ENV = {
  EXPORT_CONCURRENCY: '2',
  EXPORT_QUEUE_MAX: '8',
  // A slot that was never given back makes a request wait this long and then get 503.
  EXPORT_QUEUE_TIMEOUT_MS: '5000',
  EXPORT_PER_USER_MAX: '16',
  EXPORT_CACHE_BYTES: '0',
  EXPORT_BATCH_SIZE: '50',
};

const db = await createTestDatabase(t);
// About 0.1 MB, 1.4 MB and 4 MB with HTML.
const books = await seedGeneratedBooks(db.sql, [
  { slug: 'small', documents: 30, paragraphs: 2 },
  { slug: 'medium', documents: 200, paragraphs: 2 },
  { slug: 'large', documents: 400, paragraphs: 3 },
]);
// `huge` (16 MB) is more than socket buffers take, so an export of it to a client that barely reads
// holds its slot; its bodies are never judged, so PostgreSQL builds them.
await db.sql.unsafe(`INSERT INTO books (id, owner_id, slug, name) VALUES ('b-huge', 'u1', 'huge', 'huge')`);
await db.sql.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str, content_html)
  SELECT 'h' || i, 'b-huge', 'h' || i, 'Huge ' || i, 'document', lpad(i::text, 5, '0'), 1,
         repeat('text ', 200), '<p>' || repeat('a page of text ', 700) || '<img src="media/' || i || '.png"></p>'
  FROM generate_series(1, 1500) i`);

/** One export (book and query) and its whole response, read once without faults. */
interface Target {
  name: string;
  path: string;
  ids: string[];
  body: Buffer;
  rawBytes: number;
}

async function targets(base: string, slugs: string[]): Promise<Target[]> {
  const out: Target[] = [];
  for (const slug of slugs) {
    const book: GeneratedBook = books.get(slug)!;
    for (const query of ['', '?includeContentHtml=false']) {
      const path = `/api/v1/open/books/${slug}/docs${query}`;
      const res = await rawGet(base + path, AUTH);
      const verdict = judgeExport(res, { ids: book.ids });
      if (!verdict.ok || verdict.outcome !== 'complete')
        throw new Error(`${path} without faults is not whole: ${JSON.stringify(verdict)}`);
      out.push({ name: `${slug}${query}`, path, ids: book.ids, body: res.body, rawBytes: res.raw.length });
    }
  }
  return out;
}

/** Whether what an aborting client saw is acceptable; a problem description otherwise. */
function judgeAbort(res: AbortResult, target: Target): string | null {
  if (!res.aborted) {
    // The server closed first: the whole response arrived, and must be whole and valid.
    const verdict = judgeExport(res, target);
    return verdict.ok ? null : verdict.problem;
  }
  if (res.status === 0) return null; // hung up before the status line and headers were in
  if (res.status !== 200) return `status ${res.status}: ${res.body.toString('utf8').slice(0, 200)}`;
  return target.body.subarray(0, res.body.length).equals(res.body)
    ? null
    : 'the bytes received are not a prefix of the whole body';
}

/** A random offset in the response: a third of them in its first 64 KB, the rest anywhere (a few past its end). */
function offset(rnd: () => number, target: Target): number {
  return rnd() < 0.33
    ? Math.floor(rnd() * Math.min(64 * 1024, target.rawBytes))
    : Math.floor(rnd() * target.rawBytes * 1.02);
}

/** `count` aborts in waves of three concurrent clients; returns the problems found. */
async function abortMany(
  base: string,
  list: Target[],
  count: number,
  rnd: () => number,
  label: string,
): Promise<string[]> {
  const problems: string[] = [];
  for (let i = 0; i < count; i += 3) {
    const wave = [0, 1, 2].map(() => {
      const target = list[Math.floor(rnd() * list.length)]!;
      return { target, at: offset(rnd, target) };
    });
    const results = await Promise.all(wave.map((w) => abortAt(base + w.target.path, AUTH, w.at)));
    results.forEach((res, j) => {
      const problem = judgeAbort(res, wave[j]!.target);
      if (problem !== null)
        problems.push(`${label} abort ${i + j} (${wave[j]!.target.name} at byte ${wave[j]!.at}): ${problem}`);
    });
  }
  return problems;
}

const exportFilter = (applicationName: string) => ({ applicationName, database: db.name, states: BUSY_STATES });

/**
 * Both export slots are free: two exports of the huge book to clients that barely read hold a
 * snapshot at the same time (with EXPORT_CONCURRENCY=2, impossible while an aborted export still
 * holds a slot: the second would wait in the queue, then get 503); once they hang up, an export
 * of the medium book is served whole.
 */
async function assertSlotsFree(t: Test, base: string, applicationName: string, what: string): Promise<void> {
  const readers = [0, 1].map(() => slowReader(`${base}/api/v1/open/books/huge/docs`, AUTH, 16 * 1024));
  const held = await waitForBackends(db.sql, exportFilter(applicationName), (b) => b.length === 2, {
    timeoutMs: 10_000,
  });
  let heads = readers.map((r) => r.peek().status);
  for (let i = 0; i < 100 && heads.includes(0); i++) {
    await sleep(50);
    heads = readers.map((r) => r.peek().status);
  }
  t.equal(held.length, 2, `${what}: two exports hold a snapshot at once (${JSON.stringify(held)})`);
  t.strictSame(heads, [200, 200], `${what}: both clients have their status line`);
  for (const r of readers) r.abort();
  await Promise.all(readers.map((r) => r.done));
  t.strictSame(
    await waitForNoBackends(db.sql, exportFilter(applicationName)),
    [],
    `${what}: hung up, they leave no snapshot`,
  );
  const next = judgeExport(await rawGet(`${base}/api/v1/open/books/medium/docs`, AUTH), {
    ids: books.get('medium')!.ids,
  });
  t.strictSame(next, { ok: true, outcome: 'complete' }, `${what}: the next export is whole`);
}

for (const workers of ['1', '0']) {
  t.test(`${ABORTS} client aborts, REWRITE_WORKERS=${workers} (seed ${SEED})`, async (t) => {
    // With a worker, every batch with HTML goes to it, whatever its size.
    const unhandled = recordUnhandledRejections(t);
    const server = await startServer(t, { ...ENV, REWRITE_WORKERS: workers, REWRITE_OFFLOAD_BYTES: '0' }, db);
    const list = await targets(server.url, ['small', 'medium', 'large']);
    const rnd = prng(SEED + Number(workers));
    const problems = await abortMany(server.url, list, ABORTS, rnd, `REWRITE_WORKERS=${workers}`);
    t.strictSame(problems, [], `seed ${SEED}: every client saw a prefix of the whole response`);
    const busy = await waitForNoBackends(db.sql, exportFilter('kbx-test-export'));
    t.strictSame(unhandled, [], `seed ${SEED}: no promise of the server was left rejected and unhandled`);
    t.strictSame(busy, [], 'no export backend is left in a transaction or a query');
    await assertSlotsFree(t, server.url, 'kbx-test-export', 'after the aborts');
  });
}

t.test(`a server process: RSS back near its baseline after ${PROCESS_ABORTS} aborts (seed ${SEED})`, async (t) => {
  const proc = await startServerProcess({
    databaseUrl: db.url,
    env: { ...ENV, REWRITE_WORKERS: '1' },
    coverage: false,
  });
  t.teardown(() => proc.stop());
  const list = await targets(proc.base, ['medium', 'large']);
  // Warm: the heap, the rewrite worker and the pool reach their working size before the baseline.
  for (let i = 0; i < 2; i++) await targets(proc.base, ['medium', 'large']);
  const peakBefore = await proc.peakRss();
  const before = await proc.rss();
  await proc.resetPeak();

  const problems = await abortMany(proc.base, list, PROCESS_ABORTS, prng(SEED + 7), 'server process');
  // src/server.ts shuts down on an unhandled rejection or exception (close-with-grace).
  if (!(await isServing(proc.base, proc.pid))) {
    t.fail(
      `seed ${SEED}: the server process stopped serving during the aborts (${problems.length} of ${PROCESS_ABORTS} clients saw something else than a prefix of the response)`,
    );
    return;
  }
  t.strictSame(problems, [], `seed ${SEED}: every client saw a prefix of the whole response`);
  const busy = await waitForNoBackends(db.sql, exportFilter('kb-export-export'));
  t.strictSame(busy, [], 'no export backend of the server process is left in a transaction or a query');
  await assertSlotsFree(t, proc.base, 'kb-export-export', 'server process');

  const after = await proc.rss();
  const peakDuring = await proc.peakRss();
  const mb = (n: number) => `${(n / MB).toFixed(1)} MB`;
  t.ok(
    after < before + 40 * MB,
    `seed ${SEED}: RSS ${mb(after)} after the aborts, ${mb(before)} before (margin 40 MB)`,
  );
  t.comment(
    `VmRSS ${mb(before)} -> ${mb(after)}; VmHWM ${mb(peakBefore)} while warming, ${mb(peakDuring)} during the aborts`,
  );
});
