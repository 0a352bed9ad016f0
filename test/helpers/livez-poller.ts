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

/** Polls `${base}/livez` every `everyMs` until stopped. */
export function pollLivez(base: string, everyMs = 20): LivezPoll {
  // Without tap's loader hooks: the worker needs none, and they cost a second of CPU to load.
  const worker = new Worker(new URL(import.meta.url), { workerData: { base, everyMs }, execArgv: [] });
  const result = new Promise<{ worst: number; polls: number }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the /livez poller exited with ${code} before it answered`)));
  });
  return {
    stop: () => {
      worker.postMessage('stop');
      return result;
    },
  };
}

if (!isMainThread && parentPort) {
  const { base, everyMs } = workerData as { base: string; everyMs: number };
  const port = parentPort;
  let running = true;
  port.once('message', () => {
    running = false;
  });
  let worst = 0;
  let polls = 0;
  while (running) {
    const start = performance.now();
    const res = await request(`${base}/livez`);
    await res.body.dump();
    worst = Math.max(worst, performance.now() - start);
    polls++;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  port.postMessage({ worst, polls });
  port.close();
}
