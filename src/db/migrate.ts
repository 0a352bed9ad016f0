/** Forward-only migrations (`sql/NNNN_name.sql`): pending ones in one transaction, serialised by an advisory lock. */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import type { Sql } from './connect.js';
import { inTransaction } from './transaction.js';

/** The `sql/` folder at the package root, from `src/db/` or from `dist/src/db/` once built. */
function migrationsDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const candidates = [path.resolve(here, '../../sql'), path.resolve(here, '../../../sql')];
  return candidates.find((c) => existsSync(path.join(c, '0001_init.sql'))) ?? candidates[0]!;
}

const MIGRATION_FILE = /^(\d{4})_[a-z0-9_]+\.sql$/;
const LOCK_ID = 7_212_345_001;

async function migrationFiles(dir: string): Promise<string[]> {
  return (await fs.readdir(dir)).filter((f) => MIGRATION_FILE.test(f)).sort();
}

/** Applies pending migrations; returns the names applied. Throws on a failed migration (rolled back). */
export async function migrate(sql: Sql, dir: string = migrationsDir()): Promise<string[]> {
  const files = await migrationFiles(dir);
  const applied: string[] = [];
  await inTransaction(sql, async (tx) => {
    // The lookup pool's short statement_timeout (DB_TIMEOUT_MS) must not cut a migration.
    await tx`SET LOCAL statement_timeout = 0`;
    await tx`SELECT pg_advisory_xact_lock(${LOCK_ID})`;
    await tx`CREATE TABLE IF NOT EXISTS schema_migrations (
      name text PRIMARY KEY,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`;
    const done = new Set((await tx<{ name: string }[]>`SELECT name FROM schema_migrations`).map((r) => r.name));
    for (const file of files) {
      if (done.has(file)) continue;
      const text = await fs.readFile(path.join(dir, file), 'utf8');
      await tx.unsafe(text);
      await tx`INSERT INTO schema_migrations (name) VALUES (${file})`;
      applied.push(file);
    }
  });
  return applied;
}

async function pendingMigrations(sql: Sql, dir: string = migrationsDir()): Promise<string[]> {
  const files = await migrationFiles(dir);
  const [table] = await sql<{ t: string | null }[]>`SELECT to_regclass('schema_migrations')::text AS t`;
  if (!table?.t) return files;
  const done = new Set((await sql<{ name: string }[]>`SELECT name FROM schema_migrations`).map((r) => r.name));
  return files.filter((f) => !done.has(f));
}

/** Thrown when the schema is behind the code: only `kb-export migrate` (or `serve --migrate`) changes it. */
class SchemaBehindError extends Error {
  override name = 'SchemaBehindError';
  constructor(readonly pending: string[]) {
    super(
      `the database schema is behind: ${pending.length} migration(s) pending (${pending.join(', ')}); ` +
        'run `kb-export migrate` (or start the server with `serve --migrate` or MIGRATE_ON_START=true)',
    );
  }
}

/** Throws SchemaBehindError when a migration is pending; changes nothing. */
export async function assertSchemaCurrent(sql: Sql, dir: string = migrationsDir()): Promise<void> {
  const pending = await pendingMigrations(sql, dir);
  if (pending.length) throw new SchemaBehindError(pending);
}
