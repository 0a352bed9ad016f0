/** Connections to PostgreSQL through postgres.js. */
import postgres from 'postgres';

export type Sql = postgres.Sql;

interface ConnectOptions {
  max: number;
  applicationName: string;
  /** Seconds a new connection may take (D8.5); postgres.js's 30 by default. */
  connectTimeoutS?: number;
  /** The sessions' statement_timeout, ms (D8.7); the server's default when unset. */
  statementTimeoutMs?: number;
  /** postgres.js `fetch_types` (default true): only array users need it, and in 3.4 a cut during it ends the server. */
  fetchTypes?: boolean;
  /** The sessions' synchronous_commit: `off` for writes a crash may lose harmlessly (rewrite plans). */
  synchronousCommit?: 'on' | 'off';
}

// postgres.js's read-write takes a PostgreSQL 14+ hot standby for writable; `primary`, like libpq, does not (D11.6).
function sessionAttrs(url: string): { target_session_attrs: 'primary' } | object {
  const query = url.split('?')[1] ?? '';
  return new URLSearchParams(query.split('#')[0]).get('target_session_attrs') === 'read-write'
    ? { target_session_attrs: 'primary' }
    : {};
}

export function connect(url: string, opts: ConnectOptions): Sql {
  return postgres(url, {
    ...sessionAttrs(url),
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
    // Timestamps are formatted by PostgreSQL (D2.6); keep bigint counts exact.
    types: {},
  });
}
