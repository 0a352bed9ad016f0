/**
 * The export's snapshot: one `READ ONLY, REPEATABLE READ` transaction on an export connection
 * (decisions.md D6.1) with the exporter's own session settings (D8.7), whose every statement is
 * bounded in time on the client side too (D8.5), so a frozen database link cannot hang an export.
 *
 * Two kinds of failure are kept apart:
 * - The connection is lost. Nothing more may be sent on it, not even a ROLLBACK, or postgres.js
 *   3.4 ends the process (db/transaction.ts): the callback sends nothing more and never settles;
 *   the snapshot fails through `failed`.
 * - A statement does not answer in time (a frozen link, an overloaded server). The snapshot fails
 *   at once, but the callback keeps waiting for that statement: when it settles on a live
 *   connection, the callback throws and begin() rolls back, so the connection returns to the pool;
 *   when the connection dies instead, it is the first case.
 */
import type { Sql } from '../../db/connect.js';
import { DependencyError } from '../../db/dependency.js';
import { inTransaction, type TransactionSql } from '../../db/transaction.js';

/** Time limits of one export's snapshot, milliseconds (decisions.md D8.5, D8.7). */
export interface SnapshotTimeouts {
  /** Longest wait for a connection and BEGIN, and for each statement before the first byte. */
  startMs: number;
  /** Longest wait for a FETCH once the export streams; also the session's statement_timeout. */
  fetchMs: number;
  /** The session's lock_timeout: an export never queues long behind a schema change. */
  lockMs: number;
  /** The session's idle_in_transaction_session_timeout; 0 turns it off. */
  idleInTransactionMs: number;
}

/** Statements of one snapshot. */
export interface Snapshot {
  /**
   * Runs one statement in the snapshot, rows as arrays of raw Buffers when `raw`. Rejects with
   * DependencyError when it takes longer than `timeoutMs`, and with the snapshot's failure once it
   * has failed.
   */
  query<T>(text: string, params: readonly unknown[], opts: { raw?: boolean; timeoutMs: number }): Promise<T>;
}

/**
 * Runs `work` in a new snapshot and returns its result once the transaction committed. Rejects
 * with `work`'s error, a DependencyError (timeout), the database's error (lost connection), or
 * `giveUp.reason()` as soon as `giveUp.signal` aborts.
 */
export async function inSnapshot<T>(
  sql: Sql,
  timeouts: SnapshotTimeouts,
  work: (snap: Snapshot) => Promise<T>,
  giveUp?: { signal: AbortSignal; reason: () => unknown },
): Promise<T> {
  let failure: unknown = null;
  let fail!: (err: unknown) => void;
  const failed = new Promise<never>((_, reject) => {
    fail = (err: unknown) => {
      failure ??= err;
      reject(failure);
    };
  });
  failed.catch(() => {});
  // The client is gone: the export stops now, not when the statement in flight returns.
  const onGiveUp = () => fail(giveUp!.reason());
  if (giveUp?.signal.aborted) onGiveUp();
  else giveUp?.signal.addEventListener('abort', onGiveUp, { once: true });
  const check = () => {
    if (failure !== null) throw failure;
  };

  let beginTimer: NodeJS.Timeout | undefined = setTimeout(
    () => fail(new DependencyError('database', `no export connection within ${timeouts.startMs} ms`)),
    timeouts.startMs,
  );
  const inSnapshotWork = async (tx: TransactionSql): Promise<T> => {
    clearTimeout(beginTimer);
    beginTimer = undefined;
    const snap: Snapshot = {
      query<R>(text: string, params: readonly unknown[], opts: { raw?: boolean; timeoutMs: number }): Promise<R> {
        check();
        const q = tx.unsafe(text, params as never[]);
        const running = (opts.raw ? q.raw() : q).execute() as unknown as Promise<R>;
        const timer = setTimeout(() => fail(new DependencyError('database', `no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs);
        const settled = running.finally(() => clearTimeout(timer));
        // A rejection is awaited by the caller or, if the caller has moved on, is the snapshot's
        // failure already; either way it must not count as unhandled.
        settled.catch(() => {});
        return settled.then((rows) => {
          check();
          return rows;
        });
      },
    };
    check();
    // decisions.md D8.7: the exporter does not depend on the database's defaults.
    await snap.query(
      `SET LOCAL lock_timeout = ${Math.trunc(timeouts.lockMs)}; ` +
        `SET LOCAL statement_timeout = ${Math.trunc(timeouts.fetchMs)}; ` +
        `SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(timeouts.idleInTransactionMs)}`,
      [],
      { timeoutMs: timeouts.startMs },
    );
    return await work(snap);
  };
  const transaction = inTransaction(sql, inSnapshotWork, { mode: 'READ ONLY ISOLATION LEVEL REPEATABLE READ' });
  // Its rejection, a lost connection's included, is the snapshot's failure.
  transaction.catch(fail);
  try {
    return (await Promise.race([transaction, failed])) as T;
  } finally {
    giveUp?.signal.removeEventListener('abort', onGiveUp);
    clearTimeout(beginTimer);
    // From here on a callback that starts late (after the begin timeout) or is still running
    // must stop at its next statement.
    failure ??= new DependencyError('database', 'the snapshot was given up');
  }
}
