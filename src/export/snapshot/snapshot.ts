/**
 * The export's snapshot (decisions.md D6.1, D8.7), each statement also bounded on the client (D8.5): a
 * late one fails the snapshot at once; a lost connection is sent nothing more (db/transaction.ts).
 */
import { DependencyError } from '../../errors.js';
import type { Sql } from '../../db/connect.js';
import { inTransaction, type TransactionSql } from '../../db/transaction.js';

/** Milliseconds (decisions.md D8.5, D8.7). */
export interface SnapshotTimeouts {
  startMs: number;
  /** For a FETCH once the export streams; also the session's statement_timeout. */
  fetchMs: number;
  /** lock_timeout: an export never queues long behind a schema change. */
  lockMs: number;
  idleInTransactionMs: number;
}

export interface Snapshot {
  /** Rows as arrays of Buffers when `raw`. Rejects with DependencyError past `timeoutMs`, or at once with the snapshot's failure. */
  query<T>(text: string, params: readonly unknown[], opts: { raw?: boolean; timeoutMs: number }): Promise<T>;
}

/** Rejects with `work`'s error, DependencyError (timeout), a lost connection's, or at once `giveUp.reason()`. */
export async function inSnapshot<T>(
  sql: Sql,
  timeouts: SnapshotTimeouts,
  work: (snap: Snapshot) => Promise<T>,
  giveUp?: { signal: AbortSignal; reason: () => unknown },
): Promise<T> {
  let failure: unknown = null;
  let fail!: (err: unknown) => void;
  // postgres.js never answers the statements it held back behind one it describes first (one with
  // parameters) when the connection is lost: once the snapshot fails, every statement still
  // waiting fails with it, and no statement's timer outlives the snapshot.
  const waiting = new Set<{ timer: NodeJS.Timeout; reject: (err: unknown) => void }>();
  const failed = new Promise<never>((_, reject) => {
    fail = (err: unknown) => {
      failure ??= err;
      reject(failure);
      for (const statement of waiting) {
        clearTimeout(statement.timer);
        statement.reject(failure);
      }
      waiting.clear();
    };
  });
  failed.catch(() => {});
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
        return new Promise<R>((resolve, reject) => {
          const statement = {
            timer: setTimeout(() => fail(new DependencyError('database', `no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs),
            reject,
          };
          waiting.add(statement);
          // After the snapshot failed, fail() has rejected this promise already: a late answer changes nothing.
          running.then(resolve, reject).finally(() => {
            clearTimeout(statement.timer);
            waiting.delete(statement);
          });
        });
      },
    };
    check();
    // decisions.md D8.7. No seqscan: the planner's statistics of rewrite_plans, which exports fill
    // as they go, say nothing of its size by the time a later batch reads it. No JIT: the cost of a
    // scan it cannot avoid (one-row change_tracking) is then 1e10, and PostgreSQL spent 50-180 ms
    // compiling each such query before the first byte.
    await snap.query(
      'SET LOCAL enable_seqscan = off; SET LOCAL jit = off; ' +
        `SET LOCAL lock_timeout = ${Math.trunc(timeouts.lockMs)}; ` +
        `SET LOCAL statement_timeout = ${Math.trunc(timeouts.fetchMs)}; ` +
        `SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(timeouts.idleInTransactionMs)}`,
      [],
      { timeoutMs: timeouts.startMs },
    );
    return await work(snap);
  };
  const transaction = inTransaction(sql, inSnapshotWork, { mode: 'READ ONLY ISOLATION LEVEL REPEATABLE READ' });
  transaction.catch(fail);
  try {
    return (await Promise.race([transaction, failed])) as T;
  } finally {
    giveUp?.signal.removeEventListener('abort', onGiveUp);
    clearTimeout(beginTimer);
    // A callback that starts late or is still running stops at its next statement.
    failure ??= new DependencyError('database', 'the snapshot was given up');
  }
}
