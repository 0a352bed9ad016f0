/**
 * Runs a CLI command against the configured database (DATABASE_URL or the embedded one), closing
 * the pool and the embedded server afterwards whatever happens. Commands never migrate as a side
 * effect: a schema that is behind stops them with a message naming `kb-export migrate`.
 */
import type { Config } from '../config.js';
import { connect, type Sql } from '../db/connect.js';
import { openDatabase } from '../db/database.js';
import { assertSchemaCurrent } from '../db/migrate.js';

/** Opens the database, checks its schema is current (SchemaBehindError), runs `fn`, then closes everything. */
export async function withDatabase<T>(config: Config, fn: (sql: Sql) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  const sql = connect(db.url, { max: 4, applicationName: 'kb-export-cli' });
  try {
    await assertSchemaCurrent(sql);
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
    await db.stop();
  }
}
