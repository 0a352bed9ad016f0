/**
 * A hot standby's recovery conflict (D11.5): the standby cancelled a query, or ended
 * its session, because replaying the primary's changes could not wait longer
 * (max_standby_streaming_delay). PostgreSQL reports it as SQLSTATE 40001 (a snapshot, lock or
 * tablespace conflict) or 40P01 (a buffer pin deadlock), in words that follow lc_messages.
 * A session idle in its transaction (an export waiting for its client) is terminated instead, and
 * postgres.js drops an error that arrives while no query runs: the client sees a lost connection,
 * so the standby's conflict count tells (conflictsSoFar). The error itself is told by
 * dependency.ts's isRecoveryConflict, from its SQLSTATE and the server it came from.
 */
import type { Sql } from '../connect.js';
import { withTimeout } from '../dependency.js';

/**
 * Recovery conflicts the standby behind `sql` has counted in its database so far
 * (pg_stat_database_conflicts), or null when it does not answer within `timeoutMs`.
 */
export async function conflictsSoFar(sql: Sql, timeoutMs: number): Promise<bigint | null> {
  try {
    const work = sql<{ n: string }[]>`
      SELECT (confl_tablespace + confl_lock + confl_snapshot + confl_bufferpin + confl_deadlock)::text AS n
      FROM pg_stat_database_conflicts WHERE datname = current_database()`;
    const rows = await withTimeout(work, timeoutMs, 'replica', 'recovery conflict count');
    return rows[0] ? BigInt(rows[0].n) : null;
  } catch {
    return null;
  }
}
