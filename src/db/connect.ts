/**
 * Connections to PostgreSQL through porsager's `postgres` client.
 */
import postgres from 'postgres';

export type Sql = postgres.Sql;

export interface ConnectOptions {
  /** Most connections this pool opens. */
  max: number;
  applicationName: string;
}

/** A pool for `url`. Notices are not printed: they are not errors and would clutter logs. */
export function connect(url: string, opts: ConnectOptions): Sql {
  return postgres(url, {
    max: opts.max,
    onnotice: () => {},
    // UTC sessions: seed timestamps without a zone mean UTC, whatever the server's own setting.
    connection: { application_name: opts.applicationName, TimeZone: 'UTC' },
    // Timestamps are formatted by PostgreSQL (decisions.md D2.6); keep bigint counts exact.
    types: {},
  });
}
