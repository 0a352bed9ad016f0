/**
 * The export's snapshot (D6.1, D8.7), each statement also bounded on the client (D8.5): a
 * late one fails the snapshot at once; a lost connection is sent nothing more (db/transaction.ts).
 */
import { DependencyError } from '../../errors.js';
import type { Sql } from '../../db/connect.js';
import { inTransaction, type TransactionSql } from '../../db/transaction.js';

/** Milliseconds (D8.5, D8.7). */
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

/**
 * The snapshot's first failure and the statements waiting on it. postgres.js never answers the
 * statements it held back behind one it describes first (one with parameters) when the connection
 * is lost: once the snapshot fails, every statement still waiting fails with it, and no statement's
 * timer outlives the snapshot.
 */
class Failure {
  #failure: unknown = null;
  readonly #waiting = new Set<{ timer: NodeJS.Timeout; reject: (err: unknown) => void }>();
  #reject!: (err: unknown) => void;
  /** Rejects with the first failure; never resolves. */
  readonly failed = new Promise<never>((_, reject) => (this.#reject = reject));

  constructor() {
    this.failed.catch(() => {});
  }

  fail(err: unknown): void {
    this.#failure ??= err;
    this.#reject(this.#failure);
    for (const statement of this.#waiting) {
      clearTimeout(statement.timer);
      statement.reject(this.#failure);
    }
    this.#waiting.clear();
  }

  /** Throws the failure, if there is one. */
  check(): void {
    if (this.#failure !== null) throw this.#failure;
  }

  /** A failure for work that starts late or still runs: it stops at its next statement. */
  end(): void {
    this.#failure ??= new DependencyError('database', 'the snapshot was given up');
  }

  /** `tx.unsafe(text)`'s result; a late answer fails the snapshot, and a failed snapshot this statement, at once. */
  query<R>(
    tx: TransactionSql,
    text: string,
    params: readonly unknown[],
    opts: { raw?: boolean; timeoutMs: number },
  ): Promise<R> {
    this.check();
    const q = tx.unsafe(text, params as never[]);
    const running = (opts.raw ? q.raw() : q).execute() as unknown as Promise<R>;
    return new Promise<R>((resolve, reject) => {
      const statement = {
        timer: setTimeout(
          () => this.fail(new DependencyError('database', `no answer within ${opts.timeoutMs} ms`)),
          opts.timeoutMs,
        ),
        reject,
      };
      this.#waiting.add(statement);
      // After the snapshot failed, fail() has rejected this promise already: a late answer changes nothing.
      running.then(resolve, reject).finally(() => {
        clearTimeout(statement.timer);
        this.#waiting.delete(statement);
      });
    });
  }
}

/** Rejects with `work`'s error, DependencyError (timeout), a lost connection's, or at once `giveUp.reason()`. */
export async function inSnapshot<T>(
  sql: Sql,
  timeouts: SnapshotTimeouts,
  work: (snap: Snapshot) => Promise<T>,
  giveUp?: { signal: AbortSignal; reason: () => unknown },
): Promise<T> {
  const failure = new Failure();
  const onGiveUp = () => failure.fail(giveUp!.reason());
  if (giveUp?.signal.aborted) onGiveUp();
  else giveUp?.signal.addEventListener('abort', onGiveUp, { once: true });
  let beginTimer: NodeJS.Timeout | undefined = setTimeout(
    () => failure.fail(new DependencyError('database', `no export connection within ${timeouts.startMs} ms`)),
    timeouts.startMs,
  );
  const inSnapshotWork = async (tx: TransactionSql): Promise<T> => {
    clearTimeout(beginTimer);
    beginTimer = undefined;
    const snap: Snapshot = { query: (text, params, opts) => failure.query(tx, text, params, opts) };
    failure.check();
    await snap.query(sessionSettings(timeouts), [], { timeoutMs: timeouts.startMs });
    return await work(snap);
  };
  const transaction = inTransaction(sql, inSnapshotWork, { mode: 'READ ONLY ISOLATION LEVEL REPEATABLE READ' });
  transaction.catch((err: unknown) => failure.fail(err));
  try {
    return (await Promise.race([transaction, failure.failed])) as T;
  } finally {
    giveUp?.signal.removeEventListener('abort', onGiveUp);
    clearTimeout(beginTimer);
    failure.end();
  }
}

/**
 * The session's settings for the snapshot (D8.7). No seqscan: the planner's statistics
 * of rewrite_plans, which exports fill as they go, say nothing of its size by the time a later batch
 * reads it. No JIT: the cost of a scan it cannot avoid (one-row change_tracking) is then 1e10, and
 * PostgreSQL spent 50-180 ms compiling each such query before the first byte.
 */
function sessionSettings(timeouts: SnapshotTimeouts): string {
  return (
    'SET LOCAL enable_seqscan = off; SET LOCAL jit = off; ' +
    `SET LOCAL lock_timeout = ${Math.trunc(timeouts.lockMs)}; ` +
    `SET LOCAL statement_timeout = ${Math.trunc(timeouts.fetchMs)}; ` +
    `SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(timeouts.idleInTransactionMs)}`
  );
}
