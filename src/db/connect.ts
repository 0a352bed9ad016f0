/**
 * Connections to PostgreSQL through porsager's `postgres` client.
 */
import postgres from 'postgres';

export type Sql = postgres.Sql;

interface ConnectOptions {
  /** Most connections this pool opens. */
  max: number;
  applicationName: string;
  /** Seconds a new connection may take (decisions.md D8.5); postgres.js's 30 by default. */
  connectTimeoutS?: number;
  /** The sessions' statement_timeout, ms (decisions.md D8.7); the server's default when unset. */
  statementTimeoutMs?: number;
  /**
   * Whether each new connection first reads PostgreSQL's array types (postgres.js `fetch_types`),
   * which only pools that send or parse arrays (the seed loader's) need. postgres.js 3.4 starts
   * that query from a message handler and drops its promise: a connection cut while it runs is an
   * unhandled rejection, which ends the server (close-with-grace). The server's long-lived pools
   * turn it off. Default true.
   */
  fetchTypes?: boolean;
  /**
   * The sessions' synchronous_commit; PostgreSQL's default (on) when unset. `off` for writes that
   * may be lost in a crash without harm (rewrite plans): a commit need not wait for the WAL flush.
   */
  synchronousCommit?: 'on' | 'off';
}

/** A pool for `url`. Notices are not printed: they are not errors and would clutter logs. */
export function connect(url: string, opts: ConnectOptions): Sql {
  return postgres(url, {
    max: opts.max,
    onnotice: () => {},
    // UTC sessions: seed timestamps without a zone mean UTC, whatever the server's own setting.
    connection: {
      application_name: opts.applicationName,
      TimeZone: 'UTC',
      ...(opts.statementTimeoutMs !== undefined ? { statement_timeout: opts.statementTimeoutMs } : {}),
      ...(opts.synchronousCommit !== undefined ? { synchronous_commit: opts.synchronousCommit } : {}),
    },
    ...(opts.connectTimeoutS !== undefined ? { connect_timeout: opts.connectTimeoutS } : {}),
    fetch_types: opts.fetchTypes ?? true,
    // Timestamps are formatted by PostgreSQL (decisions.md D2.6); keep bigint counts exact.
    types: {},
  });
}
