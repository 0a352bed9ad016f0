/**
 * A database of a benchmark's own: `name` created afresh on the server at DATABASE_URL (dropped by
 * stop()), or, without DATABASE_URL, a throw-away embedded PostgreSQL (stopped and removed).
 * With `shared`, DATABASE_URL itself is used as it is and stop() leaves it alone.
 */
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../src/db/embedded.js';

export interface BenchDatabase {
  url: string;
  /** Where it runs, for the report: never a password. */
  where: string;
  stop(): Promise<void>;
}

export async function benchDatabase(name: string, opts: { shared?: boolean } = {}): Promise<BenchDatabase> {
  const given = process.env.DATABASE_URL;
  if (given && opts.shared) return { url: given, where: 'DATABASE_URL', stop: async () => {} };
  if (given) {
    const admin = postgres(given, { max: 1, onnotice: () => {} });
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.unsafe(`CREATE DATABASE ${name}`);
    const u = new URL(given);
    u.pathname = `/${name}`;
    return {
      url: u.toString(),
      where: `${u.hostname}:${u.port || 5432}/${name} (DATABASE_URL, dropped afterwards)`,
      async stop() {
        await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await admin.end();
      },
    };
  }
  const dataDir = path.join(os.tmpdir(), `${name.replace(/_/g, '-')}-${process.pid}`);
  const db = await startEmbeddedPostgres(dataDir);
  return {
    url: db.url,
    where: 'embedded PostgreSQL (throw-away)',
    async stop() {
      await db.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
