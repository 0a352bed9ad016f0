/**
 * Why an export failed, for its log line and metrics (D11.1, D11.5): a standby's
 * recovery conflict, a lost fleet-wide lease, or anything else.
 */
import type { Sql } from '../db/connect.js';
import { isConnectionLost, isRecoveryConflict } from '../db/dependency.js';
import { conflictsSoFar } from '../db/replica/recovery-conflict.js';
import { LeaseLostError } from './admission/user-leases.js';
import type { FailureCause } from './export-log.js';

/** What is known before an export starts that helps to name its failure later. */
export interface CauseWatch {
  /** The cause of `err`, the export's failure. Never rejects. */
  causeOf(err: unknown): Promise<FailureCause>;
}

/**
 * Starts watching an export read from `source` (`standby`: a hot standby, else the primary): on a
 * standby, its recovery conflict count now, so a lost connection later is told a conflict when the
 * count grew meanwhile (recovery-conflict.ts).
 */
export function watchCause(source: { standby: boolean; lookupSql: Sql }, timeoutMs: number): CauseWatch {
  const before = source.standby ? conflictsSoFar(source.lookupSql, timeoutMs) : null;
  return {
    async causeOf(err) {
      const cause = (err as { cause?: unknown } | null)?.cause;
      if (isRecoveryConflict(err, source.standby) || isRecoveryConflict(cause, source.standby))
        return 'recovery_conflict';
      if (err instanceof LeaseLostError) return 'lease_lost';
      if (before !== null && (isConnectionLost(err) || isConnectionLost(cause))) {
        const [was, now] = [await before, await conflictsSoFar(source.lookupSql, timeoutMs)];
        if (was !== null && now !== null && now > was) return 'recovery_conflict';
      }
      return 'other';
    },
  };
}
