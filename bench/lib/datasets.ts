/**
 * The benchmark database and its knowledge bases. With DATABASE_URL, a database of its own
 * (`kb_export_bench`) on that server, kept between runs: a knowledge base already holding the same
 * generated data is reused rather than generated again. Otherwise a throw-away embedded PostgreSQL.
 */
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { connect, type Sql } from '../../src/db/connect.js';
import { startEmbeddedPostgres } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { loadGenerated } from './load-generated.js';

export const BENCH_USER = 'bench-user';
export const BENCH_KEY = 'kbx_bench_key';
const BENCH_DB = 'kb_export_bench';

export interface BenchDatabase {
  url: string;
  /** `embedded` or the server's address without credentials. */
  where: string;
  sql: Sql;
  close(): Promise<void>;
}

/** Opens (and migrates) the benchmark database. Throws when the server cannot be reached. */
export async function openBenchDatabase(): Promise<BenchDatabase> {
  const given = process.env.DATABASE_URL;
  if (given) {
    const admin = postgres(given, { max: 1, onnotice: () => {} });
    try {
      const [exists] = await admin`SELECT 1 FROM pg_database WHERE datname = ${BENCH_DB}`;
      if (!exists) await admin.unsafe(`CREATE DATABASE ${BENCH_DB}`);
    } finally {
      await admin.end();
    }
    const u = new URL(given);
    u.pathname = `/${BENCH_DB}`;
    const sql = connect(u.toString(), { max: 4, applicationName: 'kb-export-bench' });
    await migrate(sql);
    return {
      url: u.toString(),
      where: `${u.hostname}:${u.port || 5432}/${BENCH_DB} (DATABASE_URL)`,
      sql,
      close: () => sql.end({ timeout: 5 }),
    };
  }
  const dataDir = path.join(os.tmpdir(), `kb-export-bench-${process.pid}`);
  const db = await startEmbeddedPostgres(dataDir);
  const sql = connect(db.url, { max: 4, applicationName: 'kb-export-bench' });
  await migrate(sql);
  return {
    url: db.url,
    where: 'embedded PostgreSQL (throw-away)',
    sql,
    async close() {
      await sql.end({ timeout: 5 });
      await db.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Dataset {
  name: string;
  slug: string;
  bookId: string;
  /** Documents generated, categories and inactive ones included. */
  generated: number;
  /** Documents the default export returns (active, categories excluded). */
  exported: number;
  /** Load time in this run, ms; 0 when reused. */
  loadMs: number;
}

/**
 * Makes sure knowledge base `name` holds `documents` generated documents (seed 42), loading it
 * when missing or generated otherwise (bench/lib/load-generated.ts tells). Progress goes to `log`.
 */
export async function ensureDataset(
  sql: Sql,
  name: string,
  documents: number,
  log: (line: string) => void,
): Promise<Dataset> {
  const slug = name;
  const bookId = `bench-${name}`;
  let reported = 0;
  const loaded = await loadGenerated(sql, {
    documents,
    seed: 42,
    bookId,
    bookSlug: slug,
    userId: BENCH_USER,
    apiKey: BENCH_KEY,
    replace: true,
    onProgress: (done: number, bytes: number) => {
      if (done - reported >= 10_000) {
        reported = done;
        log(
          `  ${name}: ${done.toLocaleString('en')} of ${documents.toLocaleString('en')} documents, ${(bytes / 1e6).toFixed(0)} MB`,
        );
      }
    },
  });
  if (!loaded.skipped)
    log(`  ${name}: ${documents.toLocaleString('en')} documents loaded in ${(loaded.ms / 1000).toFixed(1)} s`);
  const [row] = await sql<{ exported: number; generated: number }[]>`
    SELECT count(*) FILTER (WHERE status = 1 AND type <> 'category')::int AS exported, count(*)::int AS generated
    FROM documents WHERE book_id = ${bookId}`;
  return {
    name,
    slug,
    bookId,
    generated: row!.generated,
    exported: row!.exported,
    loadMs: loaded.skipped ? 0 : loaded.ms,
  };
}
