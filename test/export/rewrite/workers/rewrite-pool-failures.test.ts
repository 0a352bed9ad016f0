/**
 * Failure isolation in the rewrite workers (src/export/rewrite/workers/rewrite-pool.ts, decisions.md D8.6): a
 * worker that dies or hangs fails only the batch it was on, the batches queued behind it go to a
 * fresh worker (each at most twice), replacements back off and are logged, and a worker that cannot
 * load is not restarted in a loop. Faults are real: fixtures/poison-worker.ts exits, throws or
 * hangs on a marker in its batch; fixtures/fails-at-load-worker.ts throws as it loads.
 * (A file of its own: every worker takes about half a second to load under the tests' TypeScript loader.)
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { WorkerOptions } from 'node:worker_threads';
import t from 'tap';
import { rewriteJsonText, rewrittenByPool } from '../../../helpers/plans.js';
import { leanRewritePool, leanWorkerThreads } from '../../../helpers/lean-workers.js';
import type { RewritePoolOptions } from '../../../../src/export/rewrite/workers/rewrite-jobs.js';
import { SLOWEST_PLANNING_BYTES_PER_S } from '../../../../src/export/rewrite/plans/html-plan.js';

const RewritePool = await leanRewritePool(t);

// Each test has a pool of its own; most of their time is waiting for workers to load or time out.
t.jobs = 3;

const PREFIX = '/media/';
const json = (html: string) => Buffer.from(JSON.stringify(html));
const fixture = (name: string) => new URL(`./fixtures/${name}.js`, import.meta.url);

interface LogLine {
  level: 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

/** A fake of pino's logger that keeps the lines it is given. */
function collectingLog() {
  const lines: LogLine[] = [];
  const log = {
    warn: (obj: object, msg: string) => lines.push({ level: 'warn', obj: obj as LogLine['obj'], msg }),
    error: (obj: object, msg: string) => lines.push({ level: 'error', obj: obj as LogLine['obj'], msg }),
  };
  return { lines, log };
}

/** A pool of fixtures/poison-worker.ts whose log lines are collected in `lines`. */
function poisonPool(t: { teardown(fn: () => unknown): void }, size: number, options: RewritePoolOptions = {}) {
  const { lines, log } = collectingLog();
  const pool = new RewritePool(size, { workerUrl: fixture('poison-worker'), log, ...options });
  t.teardown(() => pool.close());
  return { pool, lines };
}

/** Polls until `ok()` (a worker was replaced, a spawn was seen); throws after `limitMs`. */
async function until(ok: () => boolean, what: string, limitMs = 30_000): Promise<void> {
  const start = Date.now();
  while (!ok()) {
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

const batch = (i: number) => [json(`<p>batch ${i}</p><img src="i${i}.png">`)];
const expected = (texts: Buffer[]) => texts.map((text) => rewriteJsonText(text, PREFIX));

for (const [marker, reason] of [
  ['POISON-EXIT', /^rewrite worker stopped \(exit code 3\)$/],
  ['POISON-THROW', /^rewrite worker failed: fixture: POISON-THROW$/],
] as const) {
  t.test(
    `${marker}: the batch that kills its worker fails alone; those queued behind it are rewritten by another (D8.6)`,
    async (t) => {
      const { pool, lines } = poisonPool(t, 2);
      // Twelve batches on two workers: the poison is the second on its worker, several wait behind it.
      const batches = Array.from({ length: 12 }, (_, i) =>
        i === 3 ? [json(`<p>${marker}</p><img src="p.png">`)] : batch(i),
      );
      const results = await Promise.allSettled(batches.map((texts) => rewrittenByPool(pool, texts, PREFIX)));
      results.forEach((r, i) => {
        if (i === 3)
          t.match(
            r,
            { status: 'rejected', reason: { name: 'RewriteWorkerError', message: reason } },
            'the poison batch fails',
          );
        else t.same(r, { status: 'fulfilled', value: expected(batches[i]!) }, `batch ${i} rewritten`);
      });
      t.equal(lines.length, 1, 'one log line for the death');
      t.match(lines[0], { level: 'warn', obj: { reason, failed: 1, restartInMs: 100 } });
      t.ok(
        (lines[0]!.obj.resent as number) > 0,
        `batches queued behind the poison were sent again (${lines[0]!.obj.resent})`,
      );
      await until(() => pool.restarts > 0, 'the dead worker is replaced');
      t.equal(pool.restarts, 1, 'restarts counts the replacement');
      const after = Array.from({ length: 4 }, (_, i) => batch(100 + i));
      t.same(
        await Promise.all(after.map((texts) => rewrittenByPool(pool, texts, PREFIX))),
        after.map(expected),
        'the pool works on',
      );
    },
  );
}

t.test('while its only worker is replaced, batches wait for the new one, at most maxQueued', async (t) => {
  const { pool } = poisonPool(t, 1, { maxQueued: 2 });
  const first = rewrittenByPool(pool, batch(0), PREFIX);
  const poison = rewrittenByPool(pool, [json('<p>POISON-EXIT</p><img src="p.png">')], PREFIX).catch(
    (err: unknown) => err,
  );
  const queued = [1, 2].map((i) => rewrittenByPool(pool, batch(i), PREFIX));
  t.same(await first, expected(batch(0)), 'the batch answered before the death');
  t.match(await poison, { name: 'RewriteWorkerError', message: /exit code 3/ });
  // Still within the 100 ms backoff: no worker runs, and the two batches sent again fill the queue.
  await t.rejects(rewrittenByPool(pool, batch(3), PREFIX), {
    name: 'RewriteWorkerError',
    message: /2 batches already wait/,
  });
  t.same(
    await Promise.all(queued),
    [expected(batch(1)), expected(batch(2))],
    'the queued batches are rewritten by the replacement',
  );
  t.equal(pool.restarts, 1);
});

t.test('a batch is sent again at most twice: the third death in a row behind others fails it', async (t) => {
  const { pool, lines } = poisonPool(t, 1);
  const poisons = [1, 2, 3].map((i) => rewrittenByPool(pool, [json(`<p>POISON-EXIT ${i}</p>`)], PREFIX));
  const innocent = rewrittenByPool(pool, batch(0), PREFIX);
  for (const p of poisons) await t.rejects(p, { name: 'RewriteWorkerError', message: /exit code 3/ });
  await t.rejects(innocent, {
    name: 'RewriteWorkerError',
    message: /exit code 3\) \(the batch was already sent again 2 times\)$/,
  });
  t.same(
    lines.map((l) => l.obj.restartInMs),
    [100, 200, 400],
    'each death in a row doubles the wait before the next worker',
  );
});

t.test('a hung batch times out from when its worker starts it; the others go to a fresh worker', async (t) => {
  const jobTimeoutMs = 2000;
  const { pool, lines } = poisonPool(t, 1, { jobTimeoutMs });
  // Each slow batch works 0.6 s, so on a loaded machine it has 1.4 s to spare before the timeout;
  // the fourth has waited 2.4 s in all, but only 0.6 s at the head.
  const slow = [1, 2, 3, 4].map((i) =>
    rewrittenByPool(pool, [json(`<p>SLOW-WORK-600 ${i}</p><img src="s.png">`)], PREFIX),
  );
  const hang = json('<p>POISON-HANG</p>');
  const hung = rewrittenByPool(pool, [hang], PREFIX).catch((err: unknown) => err);
  const behind = [3, 4].map((i) => rewrittenByPool(pool, batch(i), PREFIX));
  const answered = await Promise.all(slow);
  t.same(
    answered.map((a) => a.length),
    [1, 1, 1, 1],
    'the slow batches are answered, the last queued for longer than the timeout',
  );
  const headSince = Date.now();
  // The floor, and a millisecond for the batch's few bytes.
  const timeoutMs = jobTimeoutMs + Math.ceil((hang.length * 1000) / SLOWEST_PLANNING_BYTES_PER_S);
  t.match(await hung, {
    name: 'RewriteWorkerError',
    message: `rewrite worker took longer than ${timeoutMs} ms over one batch`,
  });
  const waited = Date.now() - headSince;
  t.ok(waited >= timeoutMs - 20 && waited < timeoutMs + 5000, `rejected ${waited} ms after it reached the head`);
  t.same(await Promise.all(behind), [expected(batch(3)), expected(batch(4))], 'the batches behind it are rewritten');
  t.match(lines, [{ level: 'warn', obj: { reason: /took longer/, failed: 1, resent: 2 } }]);
  t.equal(pool.restarts, 1);
});

t.test('a batch may take longer than REWRITE_TIMEOUT_MS by its bytes at the slowest planning speed', async (t) => {
  const jobTimeoutMs = 300;
  const { pool, lines } = poisonPool(t, 1, { jobTimeoutMs });
  // Each works 1.2 s: longer than the floor, and than it plus a small batch's allowance; 4 MiB
  // more of text grant 4 s more.
  const small = rewrittenByPool(pool, [json('<p>SLOW-WORK</p><img src="s.png">')], PREFIX).catch((err: unknown) => err);
  const large = [json(`<p>SLOW-WORK</p><img src="s.png"><p>${'x'.repeat(4 * 1024 * 1024)}</p>`)];
  t.match(
    await small,
    { name: 'RewriteWorkerError', message: /^rewrite worker took longer than 301 ms over one batch$/ },
    'a small batch gets the floor',
  );
  t.same(
    await rewrittenByPool(pool, large, PREFIX),
    expected(large),
    'a batch of 4 MiB is given 4 s more, and planned',
  );
  t.match(lines, [{ level: 'warn', obj: { reason: /took longer/, failed: 1 } }]);
});

t.test('a worker that fails at load is retried with a growing backoff, logged, and batches fail fast', async (t) => {
  // Real workers, their creation and exit times recorded; under the tests' TypeScript loader a
  // worker takes about half a second to load, so the backoff is checked as the gap from one's exit
  // to the next one's creation (a loop without backoff would show none).
  const created: number[] = [];
  const exited: number[] = [];
  class RecordedWorker extends leanWorkerThreads.Worker {
    constructor(url: URL, options?: WorkerOptions) {
      super(url, options);
      created.push(Date.now());
      this.on('exit', () => exited.push(Date.now()));
    }
  }
  const Pool = await leanRewritePool(t, { ...leanWorkerThreads, Worker: RecordedWorker });
  const { lines, log } = collectingLog();
  const pool = new Pool(1, { workerUrl: fixture('fails-at-load-worker'), log });
  t.teardown(() => pool.close());
  const loadError = /^no rewrite worker could be started: rewrite worker failed: fixture: this worker cannot load$/;
  const held = rewrittenByPool(pool, batch(0), PREFIX);
  // Sent as soon as the first fails, while no worker runs (the replacement waits 100 ms).
  let workersWhenSent = 0;
  const meanwhile = held.catch(() => {
    workersWhenSent = created.length;
    return rewrittenByPool(pool, batch(1), PREFIX);
  });
  await t.rejects(held, { name: 'RewriteWorkerError', message: loadError }, 'a batch held by the worker fails');
  await t.rejects(meanwhile, { name: 'RewriteWorkerError', message: loadError }, 'so does one sent while none runs');
  t.equal(workersWhenSent, 1, 'it was sent before any replacement was created');
  await until(() => created.length >= 4, 'three replacements were created', 60_000);
  await pool.close();
  const gaps = [0, 1, 2].map((i) => created[i + 1]! - exited[i]!);
  [100, 200, 400].forEach((backoff, i) =>
    t.ok(gaps[i]! >= backoff - 10, `replacement ${i + 1} created ${gaps[i]} ms after the exit (backoff ${backoff})`),
  );
  t.equal(pool.restarts, created.length - 1, 'restarts counts every replacement');
  t.ok(lines.length >= 3, 'every failure is logged');
  lines.forEach((line, i) =>
    t.match(line, {
      level: 'error',
      msg: 'rewrite worker failed to start',
      obj: { reason: /cannot load/, restartInMs: 100 * 2 ** i },
    }),
  );
  const spawned = created.length;
  await sleep(1000);
  t.equal(created.length, spawned, 'a closed pool starts no more workers');
});
