/**
 * Failures of the services kb-export depends on (PostgreSQL, the rate-limit store), told apart from
 * bugs: before the first byte they are answered `503 SERVICE_UNAVAILABLE` with `Retry-After`, and
 * every wait on them is bounded (decisions.md D8.5).
 */

export type Dependency = 'database' | 'rate-limit store';

/** A dependency could not be reached or did not answer in time (decisions.md D8.5). */
export class DependencyError extends Error {
  override name = 'DependencyError';
  constructor(
    readonly dependency: Dependency,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * Whether `err` means the database connection is gone or could not be made: a FATAL or PANIC
 * error, SQLSTATE class 08 (connection exception) or 57P01-57P03 (shutdown, cannot connect now),
 * or a socket error or connect timeout reported by postgres.js.
 */
export function isConnectionLost(err: unknown): boolean {
  const e = err as { code?: unknown; severity?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  if (e.severity === 'FATAL' || e.severity === 'PANIC') return true;
  return typeof e.code === 'string' && /^(08|57P0[1-3]$|CONNECTION_|CONNECT_TIMEOUT$|ECONN|EPIPE$|ETIMEDOUT$|EHOSTUNREACH$|ENETUNREACH$)/.test(e.code);
}

/**
 * Whether `err` says the database refused the work for now rather than that the request is
 * wrong: a lock or statement timeout (55P03, 57014), too many connections (53300), a serialisation
 * or deadlock failure cannot happen in a read-only export, so those are left to 500.
 */
function isDatabaseBusy(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '55P03' || code === '57014' || code === '53300';
}

/** `err` as a DependencyError when it is a database outage (decisions.md D8.5), else undefined. */
export function asDatabaseOutage(err: unknown): DependencyError | undefined {
  if (err instanceof DependencyError) return err;
  if (isConnectionLost(err) || isDatabaseBusy(err)) {
    return new DependencyError('database', `database unavailable: ${(err as Error).message}`, { cause: err });
  }
  return undefined;
}

/**
 * `work`, or a DependencyError once `ms` milliseconds have passed (decisions.md D8.5: every wait on
 * a dependency has a timeout). The work itself is not cancelled: its result is then ignored, and a
 * rejection after the timeout is not reported as unhandled.
 */
export function withTimeout<T>(work: Promise<T>, ms: number, dependency: Dependency, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DependencyError(dependency, `${what}: no answer within ${ms} ms`)), ms);
  });
  work.catch(() => {});
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
