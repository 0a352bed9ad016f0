/**
 * Polls a server's `/livez` from a worker thread, so the latency measured is the server's: a test
 * that reads a burst of bodies on its own event loop would otherwise delay its polls itself.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { request } from 'undici';

export interface LivezPoll {
  /** Stops after the poll in flight; the slowest answer, ms, and how many polls were made. */
  stop(): Promise<{ worst: number; polls: number }>;
}

const EVERY_MS = 20;

/** Polls `${base}/livez` every 20 ms until stopped. */
export function pollLivez(base: string): LivezPoll {
  // Without tap's loader hooks: the worker needs none, and they cost a second of CPU to load.
  const worker = new Worker(new URL(import.meta.url), { workerData: { livezBase: base }, execArgv: [] });
  const result = new Promise<{ worst: number; polls: number }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the /livez poller exited with ${code} before it answered`)));
  });
  // A poller that fails before stop() is asked reports it there, not as an unhandled rejection.
  result.catch(() => {});
  return {
    stop: () => {
      worker.postMessage('stop');
      return result;
    },
  };
}

const livezBase = isMainThread ? undefined : (workerData as { livezBase?: string } | null)?.livezBase;
if (livezBase !== undefined && parentPort) {
  const port = parentPort;
  let running = true;
  port.once('message', () => {
    running = false;
  });
  let worst = 0;
  let polls = 0;
  while (running) {
    const start = performance.now();
    const res = await request(`${livezBase}/livez`);
    await res.body.dump();
    worst = Math.max(worst, performance.now() - start);
    polls++;
    await new Promise((r) => setTimeout(r, EVERY_MS));
  }
  port.postMessage({ worst, polls });
  port.close();
}
