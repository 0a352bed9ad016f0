/**
 * Runs a CLI command against the configured database (DATABASE_URL or the embedded one), closing
 * the pool and the embedded server afterwards whatever happens.
 */
import type { Config } from '../config.js';
import { connect, type Sql } from '../db/connect.js';
import { openDatabase } from '../db/database.js';
import { migrate } from '../db/migrate.js';

/** Opens the database, applies pending migrations, runs `fn`, then closes everything. */
export async function withDatabase<T>(config: Config, fn: (sql: Sql) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  const sql = connect(db.url, { max: 4, applicationName: 'kb-export-cli' });
  try {
    await migrate(sql);
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
    await db.stop();
  }
}
