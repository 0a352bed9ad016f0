/**
 * Transactions that survive a lost connection without ending the process.
 *
 * postgres.js 3.4.x writes small messages from a setImmediate; once a transaction's connection has
 * closed, the ROLLBACK (or COMMIT) that begin() sends when its callback settles dereferences a null
 * socket: an uncaught TypeError that ends the process (porsager/postgres#1208, #1154). A seed load,
 * a restore or `warm` whose link is cut would then die with a stack trace instead of a message.
 * The export's snapshot (export/snapshot/snapshot.ts) goes through here too, with its timeouts.
 */
import type postgres from 'postgres';
import type { Sql } from './connect.js';
import { isConnectionLost } from './dependency.js';

export type TransactionSql = postgres.TransactionSql;

/**
 * `sql.begin(mode, work)`, except that once the connection is lost nothing more is sent on it:
 * `work`'s failure then never settles begin()'s callback (so no ROLLBACK is written to the dead
 * socket; PostgreSQL discards the transaction when its session ends) and the result rejects with
 * the connection's error. Any other failure of `work` rolls back and rejects as begin() does.
 * `opts.mode` is BEGIN's (e.g. `READ ONLY`).
 */
export function inTransaction<T>(
  sql: Sql,
  work: (tx: TransactionSql) => Promise<T>,
  opts: { mode?: string } = {},
): Promise<T> {
  let lost = false;
  let rejectLost!: (err: unknown) => void;
  const lostConnection = new Promise<never>((_, reject) => (rejectLost = reject));
  lostConnection.catch(() => {});
  const markLost = (err: unknown) => {
    lost = true;
    rejectLost(err);
  };
  const transaction = sql.begin(opts.mode ?? '', async (tx) => {
    try {
      return await work(tx);
    } catch (err) {
      // A failure after the loss may be of the work's own making (a stream torn down meanwhile):
      // the connection is lost all the same.
      if (!lost && !isConnectionLost(err)) throw err;
      markLost(err);
      return new Promise<never>(() => {});
    }
  }) as Promise<T>;
  // begin() rejects when its connection closes, even while the callback still waits.
  transaction.catch((err: unknown) => {
    if (isConnectionLost(err)) markLost(err);
  });
  return Promise.race([transaction, lostConnection]);
}
