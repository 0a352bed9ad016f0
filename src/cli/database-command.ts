/**
 * Runs a CLI command against the configured database (DATABASE_URL or the embedded one), closing
 * the pool and the embedded server afterwards whatever happens. Commands never migrate as a side
 * effect: a schema that is behind stops them with a message naming `kb-export migrate`.
 */
import type { Config } from '../config.js';
import { connect, type Sql } from '../db/connect.js';
import { openDatabase } from '../db/database.js';
import { isConnectionLost } from '../db/dependency.js';
import { assertSchemaCurrent } from '../db/migrate.js';

/**
 * Opens the database, checks its schema is current (SchemaBehindError), runs `fn`, then closes
 * everything. A lost or refused connection is rethrown as one plain sentence that says so (the
 * transaction it interrupted was discarded by PostgreSQL: db/transaction.ts).
 */
export async function withDatabase<T>(config: Config, fn: (sql: Sql) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  const sql = connect(db.url, { max: 4, applicationName: 'kb-export-cli' });
  let reached = false;
  try {
    await assertSchemaCurrent(sql);
    reached = true;
    return await fn(sql);
  } catch (err) {
    if (!isConnectionLost(err)) throw err;
    const why = (err as Error).message;
    throw new Error(
      reached ? `lost the connection to PostgreSQL (${why}); what was not committed was discarded` : `cannot reach PostgreSQL (${why})`,
      { cause: err },
    );
  } finally {
    await sql.end({ timeout: 5 });
    await db.stop();
  }
}
