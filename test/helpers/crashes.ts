/**
 * How a server under test crashes: a rejection nobody handled, while the test runs the server
 * in-process, and a server child process that is gone. In production (src/server.ts)
 * close-with-grace treats an unhandled rejection as fatal and stops the whole server, so a fault
 * that leaves a promise rejected and unawaited takes every other export down with it.
 */
interface Teardown {
  teardown(fn: () => unknown): void;
}

/** Starts recording; returns the list, which grows as rejections go unhandled. Stops at teardown. */
export function recordUnhandledRejections(t: Teardown): string[] {
  const seen: string[] = [];
  const onRejection = (reason: unknown) => {
    const e = reason as { name?: unknown; message?: unknown; stack?: unknown } | null;
    seen.push(String(e?.stack ?? `${String(e?.name)}: ${String(e?.message ?? reason)}`).split('\n').slice(0, 4).join(' | '));
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
