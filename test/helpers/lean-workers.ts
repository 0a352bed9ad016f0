/**
 * The rewrite pool for tests, its workers started without tap's mock loader. Workers inherit the
 * test process's execArgv, where that loader costs each of them about half a second of CPU to start
 * (more than the worker itself), and no worker mocks anything; coverage stays. Production's workers
 * inherit only the shebang's V8 flags, which are per process anyway.
 */
import * as workerThreads from 'node:worker_threads';
import type { RewritePool } from '../../src/export/rewrite/workers/rewrite-pool.js';

const execArgv = process.execArgv.filter((arg) => !arg.includes('/@tapjs/mock/'));

class LeanWorker extends workerThreads.Worker {
  constructor(url: string | URL, options: workerThreads.WorkerOptions = {}) {
    super(url, { execArgv, ...options });
  }
}

/** `node:worker_threads` with LeanWorker, for a t.mockImport of a module that starts workers. */
export const leanWorkerThreads = { ...workerThreads, Worker: LeanWorker };

export interface MockingTest {
  mockImport<T>(module: string, mocks: Record<string, unknown>): Promise<T>;
}

/** src/export/rewrite/workers/rewrite-pool.ts imported with `leanWorkerThreads` (or `threads`). */
export async function leanRewritePool(
  t: MockingTest,
  threads: object = leanWorkerThreads,
): Promise<typeof RewritePool> {
  const pool = await t.mockImport<typeof import('../../src/export/rewrite/workers/rewrite-pool.js')>(
    new URL('../../src/export/rewrite/workers/rewrite-pool.js', import.meta.url).href,
    {
      'node:worker_threads': threads,
    },
  );
  return pool.RewritePool;
}
