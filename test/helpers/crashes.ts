/**
 * How a server under test crashes: a rejection nobody handled, while the test runs the server
 * in-process, and a server child process that no longer answers. In production (src/server.ts)
 * close-with-grace treats an unhandled rejection as fatal: the server stops listening at once, lets
 * running exports finish within SHUTDOWN_GRACE_MS and exits, so a fault that leaves a promise
 * rejected and unawaited takes every other export down with it.
 */
import { rawGet } from './clients.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** Starts recording; returns the list, which grows as rejections go unhandled. Stops at teardown. */
export function recordUnhandledRejections(t: Teardown): string[] {
  const seen: string[] = [];
  const onRejection = (reason: unknown) => {
    const e = reason as { name?: unknown; message?: unknown; stack?: unknown } | null;
    seen.push(
      String(e?.stack ?? `${String(e?.name)}: ${String(e?.message ?? reason)}`)
        .split('\n')
        .slice(0, 4)
        .join(' | '),
    );
  };
  process.on('unhandledRejection', onRejection);
  t.teardown(() => {
    process.removeListener('unhandledRejection', onRejection);
  });
  return seen;
}

/** Whether process `pid` still exists (signal 0 only checks). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether the server at `base` (`http://host:port`) still answers HTTP, whatever the status, and
 * its process `pid` still exists: a server that is shutting down stops listening before it exits.
 */
export async function isServing(base: string, pid: number): Promise<boolean> {
  const probe = await rawGet(`${base}/health-probe`, {}, { deadlineMs: 5000 });
  return probe.status !== 0 && isAlive(pid);
}
