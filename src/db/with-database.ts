/** Runs a CLI command against the database and closes everything after; commands never migrate. */
import type { Config } from '../config.js';
import { connect, type Sql } from './connect.js';
import { openDatabase } from './database.js';
import { isConnectionLost } from './dependency.js';
import { assertSchemaCurrent } from './migrate.js';

/** Checks the schema (SchemaBehindError), runs `fn`; a lost or refused connection becomes one plain sentence. */
export async function withDatabase<T>(config: Config, fn: (sql: Sql) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  const sql = connect(db.url, { max: 4, applicationName: 'kb-export-cli' });
  let reached = false;
  let failed = false;
  try {
    await assertSchemaCurrent(sql);
    reached = true;
    return await fn(sql);
  } catch (err) {
    failed = true;
    if (!isConnectionLost(err)) throw err;
    const why = (err as Error).message;
    throw new Error(
      reached
        ? `lost the connection to PostgreSQL (${why}); what was not committed was discarded`
        : `cannot reach PostgreSQL (${why})`,
      { cause: err },
    );
  } finally {
    // A failed command's other connections may wait in a transaction that will never commit:
    // closing them at once discards it, as PostgreSQL does when a session ends.
    await sql.end({ timeout: failed ? 0 : 5 });
    await db.stop();
  }
}
