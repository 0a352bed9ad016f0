/**
 * Where the database is: DATABASE_URL when set, otherwise an embedded PostgreSQL in KB_DATA_DIR.
 */
import type { Config } from '../config.js';
import { startEmbeddedPostgres } from './embedded.js';

export interface DatabaseTarget {
  url: string;
  embedded: boolean;
  /** Stops the embedded server; a no-op for DATABASE_URL. */
  stop(): Promise<void>;
}

/** Resolves the database to use, starting the embedded one when DATABASE_URL is unset. */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): Promise<DatabaseTarget> {
  if (config.databaseUrl) return { url: config.databaseUrl, embedded: false, stop: async () => {} };
  const db = await startEmbeddedPostgres(config.dataDir);
  return { url: db.url, embedded: true, stop: () => db.stop() };
}
