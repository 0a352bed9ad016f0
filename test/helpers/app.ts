/**
 * Test servers: the real app (src/app.ts) on a fresh database, listening on a random loopback
 * port so tests talk to it over a real socket (undici), plus a seed helper that goes through the
 * real loader.
 */
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp, type AppDeps } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/config.js';
import { connect, type Sql } from '../../src/db/connect.js';
import { ExportCache } from '../../src/export/export-cache.js';
import { loadSeed } from '../../src/load/seed-loader.js';
import type { LoadSummary } from '../../src/load/seed-writer.js';
import { createTestDatabase, type TestDatabase } from './db.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface TestServer {
  url: string;
  app: FastifyInstance;
  config: Config;
  db: TestDatabase;
  /** The export pool the app was given. */
  exportSql: Sql;
  /** The app's cache of small export bodies. */
  exportCache: ExportCache;
}

/**
 * Builds and starts the app on a fresh database (or `db`); env overrides go through loadConfig like
 * production; `deps` replaces parts the app would otherwise build itself (e.g. its rewrite workers,
 * the pool its rewrite plans are written on, a log destination).
 */
export async function startServer(
  t: Teardown,
  env: Record<string, string> = {},
  db?: TestDatabase,
  deps: Pick<AppDeps, 'rewritePool' | 'planSql' | 'logger'> = {},
): Promise<TestServer> {
  const database = db ?? (await createTestDatabase(t));
  const config = loadConfig({ RATE_LIMIT_MAX: '100000', ...env, DATABASE_URL: database.url });
  const exportSql = connect(database.url, { max: config.exportConcurrency, applicationName: 'kbx-test-export', fetchTypes: false });
  const exportCache = new ExportCache(config.exportCacheBytes);
  const app = await buildApp({ config, sql: database.sql, exportSql, exportCache, logger: false, ...deps });
  const url = await listenOnLoopback(t, app, [exportSql]);
  return { url, app, config, db: database, exportSql, exportCache };
}

/**
 * Starts `app` on a random loopback port; returns its `http://127.0.0.1:<port>`. At teardown the
 * app closes, then `pools` (the ones the test made for it).
 */
export async function listenOnLoopback(t: Teardown, app: FastifyInstance, pools: Sql[]): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  t.teardown(async () => {
    await app.close();
    await Promise.allSettled(pools.map((p) => p.end({ timeout: 1 })));
  });
  return `http://127.0.0.1:${port}`;
}

/** Loads a seed object (seed-format.md) through the real streaming loader. */
export async function seed(sql: Sql, data: unknown): Promise<LoadSummary> {
  return loadSeed(sql, Readable.from([JSON.stringify(data)]));
}

/** A minimal valid document for seeds; override any field. */
export function doc(id: string, orderKey: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id, slug: id, name: `Doc ${id}`, type: 'document', orderKey, status: 1, ...extra };
}

/** A user `u` with key `kbx_<u>` owning a book `slug` with the given documents. */
export function simpleSeed(documents: unknown[], opts: { user?: string; slug?: string; bookId?: string } = {}) {
  const user = opts.user ?? 'u1';
  return {
    users: [{ id: user, name: user, apiKeys: [{ id: `k-${user}`, key: `kbx_${user}` }] }],
    books: [
      {
        id: opts.bookId ?? `b-${user}`,
        ownerId: user,
        slug: opts.slug ?? 'kb',
        name: 'KB',
        createdAt: '2024-03-01T10:00:00.000Z',
        updatedAt: '2024-03-02T10:00:00.000Z',
        documents,
      },
    ],
  };
}
