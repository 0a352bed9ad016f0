/** Transactions surviving a lost connection, where postgres.js 3.4's ROLLBACK crashes (porsager/postgres#1208, #1154). */
import type postgres from 'postgres';
import type { Sql } from './connect.js';
import { isConnectionLost } from './dependency.js';

export type TransactionSql = postgres.TransactionSql;

/** `sql.begin(mode, work)`, sending nothing more once the connection is lost; rejects with the connection's error. */
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
      // A failure after the loss may be of the work's making (a stream torn down): the connection is lost all the same.
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
