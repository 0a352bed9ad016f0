/**
 * How long an export's snapshot may sit idle between two of its statements: raised, never lowered,
 * as the export takes on bytes that a client reading at the drain floor needs time for, so that no
 * database timeout cuts a client the export itself would keep (D8.7).
 */
import type { Snapshot } from './snapshot.js';

export class IdleAllowance {
  #ms: number;

  /**
   * @param currentMs the allowance the snapshot was opened with (SnapshotTimeouts.idleInTransactionMs).
   * @param neededMs the allowance `bytes` still to rewrite and write need, ms; 0 when none is needed.
   * @param timeoutMs the bound on the statement that raises it.
   */
  constructor(
    private readonly snap: Snapshot,
    currentMs: number,
    private readonly neededMs: (bytes: number) => number,
    private readonly timeoutMs: number,
  ) {
    this.#ms = currentMs;
  }

  /** Raises the allowance for `bytes` if they need more; the statement queues behind any FETCH in flight. */
  allow(bytes: number): void {
    const needed = this.neededMs(bytes);
    if (needed <= this.#ms) return;
    this.#ms = needed;
    const raise = `SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(needed)}`;
    // A failure here fails the snapshot, and the export's next statement with it.
    void this.snap.query(raise, [], { timeoutMs: this.timeoutMs }).catch(() => {});
  }
}
