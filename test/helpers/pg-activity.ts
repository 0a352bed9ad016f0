/**
 * What a pool left behind in PostgreSQL: the backends of one application_name on one database, as
 * pg_stat_activity shows them, and a bounded wait until none is left (in any state, or in the
 * states that hold a snapshot or run a query). The leftovers are returned for assertion messages.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Sql } from '../../src/db/connect.js';

export interface Backend {
  pid: number;
  state: string | null;
  query: string;
  /** Seconds since the backend's transaction began; null outside a transaction. */
  xactAgeS: number | null;
}

/** States in which a backend holds a transaction (a snapshot) or runs a statement. */
export const BUSY_STATES = ['active', 'idle in transaction', 'idle in transaction (aborted)'] as const;

export interface BackendFilter {
  /** The pool's application_name ('kbx-test-export' for test/helpers/app.ts, 'kb-export-export' for the server). */
  applicationName: string;
  /** The database the pool works on (other test files share the server). */
  database: string;
  /** Only backends in these states; all states when unset. */
  states?: readonly string[];
}

/** The backends matching `filter` now, seen through `sql` (any connection to the same server). */
export async function backends(sql: Sql, filter: BackendFilter): Promise<Backend[]> {
  const rows = await sql<{ pid: number; state: string | null; query: string; xact_age_s: number | null }[]>`
    SELECT pid, state, query, extract(epoch FROM now() - xact_start)::float8 AS xact_age_s
    FROM pg_stat_activity
    WHERE application_name = ${filter.applicationName} AND datname = ${filter.database}
      AND pid <> pg_backend_pid()`;
  const states = filter.states;
  return rows
    .filter((r) => states === undefined || (r.state !== null && states.includes(r.state)))
    .map((r) => ({ pid: r.pid, state: r.state, query: r.query.slice(0, 120), xactAgeS: r.xact_age_s }));
}

/**
 * Polls (every `pollMs`, default 25) until no backend matches `filter`, for at most `timeoutMs`
 * (default 5000). Returns [] when none is left, otherwise the last leftovers.
 */
export async function waitForNoBackends(
  sql: Sql,
  filter: BackendFilter,
  opts: { timeoutMs?: number; pollMs?: number } = {},
): Promise<Backend[]> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  for (;;) {
    const left = await backends(sql, filter);
    if (left.length === 0 || Date.now() >= deadline) return left;
    await sleep(opts.pollMs ?? 25);
  }
}

/**
 * Polls until `check` returns true for the current backends, for at most `timeoutMs`; returns the
 * last backends seen (the caller asserts on them).
 */
export async function waitForBackends(
  sql: Sql,
  filter: BackendFilter,
  check: (backends: Backend[]) => boolean,
  opts: { timeoutMs?: number; pollMs?: number } = {},
): Promise<Backend[]> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  for (;;) {
    const now = await backends(sql, filter);
    if (check(now) || Date.now() >= deadline) return now;
    await sleep(opts.pollMs ?? 25);
  }
}
