/** Outages of PostgreSQL and the rate-limit store, told apart from bugs, every wait bounded (D8.5). */
import { DependencyError, type Dependency } from '../errors.js';

/** A lost or refused connection: FATAL/PANIC, SQLSTATE 08 or 57P01-57P03, or a postgres.js socket error or timeout. */
export function isConnectionLost(err: unknown): boolean {
  const e = err as { code?: unknown; severity?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  if (e.severity === 'FATAL' || e.severity === 'PANIC') return true;
  return (
    typeof e.code === 'string' &&
    /^(08|57P0[1-3]$|CONNECTION_|CONNECT_TIMEOUT$|ECONN|EPIPE$|ETIMEDOUT$|EHOSTUNREACH$|ENETUNREACH$)/.test(e.code)
  );
}

/**
 * A hot standby's recovery conflict (replica/recovery-conflict.ts): SQLSTATE 40001 or 40P01 raised
 * on a connection to a hot standby (`onStandby`), whatever its message says. Told by the code and
 * the server, never by the text, which follows the session's lc_messages. A standby runs only
 * read-only snapshots, which cannot fail serialisation, and kb-export takes no locks there that
 * could deadlock: both codes then mean that replay cancelled the query. On the primary they never
 * do (D11.5).
 */
export function isRecoveryConflict(err: unknown, onStandby: boolean): boolean {
  if (!onStandby) return false;
  const code = (err as { code?: unknown } | null)?.code;
  return code === '40001' || code === '40P01';
}

// Refused for now (55P03, 57014, 53300); serialisation and deadlock failures cannot happen read-only.
function isDatabaseBusy(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '55P03' || code === '57014' || code === '53300';
}

/**
 * `err` as an outage (503 before the first byte, D8.5), or undefined when it is not one; `onStandby`
 * says whether the failing query ran on a hot standby. A standby's recovery conflict (D11.5) is one
 * of the replica's: the client retries, maybe elsewhere.
 */
export function asDatabaseOutage(err: unknown, onStandby: boolean): DependencyError | undefined {
  if (err instanceof DependencyError) return err;
  if (isRecoveryConflict(err, onStandby))
    return new DependencyError('replica', `replica cancelled the export: ${(err as Error).message}`, { cause: err });
  if (isConnectionLost(err) || isDatabaseBusy(err)) {
    return new DependencyError('database', `database unavailable: ${(err as Error).message}`, { cause: err });
  }
  return undefined;
}

/** `work`, or a DependencyError after `ms` (D8.5); the work is not cancelled, and its late rejection is swallowed. */
export function withTimeout<T>(work: Promise<T>, ms: number, dependency: Dependency, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DependencyError(dependency, `${what}: no answer within ${ms} ms`)), ms);
  });
  work.catch(() => {});
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
