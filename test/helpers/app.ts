/**
 * Test servers: the real app (src/app.ts) on a fresh database, listening on a random loopback
 * port so tests talk to it over a real socket (undici), plus a seed helper that goes through the
 * real loader.
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { Writable } from 'node:stream';
import { buildApp } from '../../src/app.js';
import type { RewritePoolOptions } from '../../src/export/rewrite/workers/rewrite-jobs.js';
import { loadConfig, type Config } from '../../src/config.js';
import { connect, type Sql } from '../../src/db/connect.js';
import { loadSeed } from '../../src/load/seed-loader.js';
import type { LoadSummary } from '../../src/load/seed-writer.js';
import { createTestDatabase, type TestDatabase } from './db.js';
import { leanRewritePool, type MockingTest } from './lean-workers.js';

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
  /** Exports served from the export cache so far (kb_export_cache_hits_total). */
  cacheHits(): Promise<number>;
}

/** Parts of the app a test may replace: where plans are written, where logs go, the rewrite workers' module. */
interface TestDeps {
  planSql?: Sql;
  logger?: false | Writable;
  /** A worker module for the app's rewrite workers instead of rewrite-worker.ts (test/export/rewrite/workers/fixtures). */
  workerUrl?: URL;
}

/**
 * The config of an app a test builds in its own process: `env` over production's through loadConfig,
 * with a rate limit no test reaches and a Redis key prefix of its own. Rewrite workers are off unless
 * `env` sets REWRITE_WORKERS: under the tests' loaders a worker takes half a second of CPU to
 * start, and the worker path has tests of its own that ask for it. So is the last line under
 * decisions.md D8.8 (MAX_EVENT_LOOP_DELAY_MS, MAX_HEAP_USED_BYTES): it would measure the test process
 * (tap, coverage, seeding, other servers), not the app, and under load it answered a contract test
 * 503; test/http/pressure.test.ts and the tests of the executable keep it on.
 */
export function testConfig(databaseUrl: string, env: Record<string, string> = {}): Config {
  return loadConfig({
    RATE_LIMIT_MAX: '100000',
    REWRITE_WORKERS: '0',
    MAX_EVENT_LOOP_DELAY_MS: '0',
    MAX_HEAP_USED_BYTES: '0',
    REDIS_KEY_PREFIX: redisKeyPrefix(),
    ...env,
    DATABASE_URL: databaseUrl,
  });
}

/**
 * Builds and starts the app on a fresh database (or `db`); env overrides go through loadConfig like
 * production. Plans are written on the test database's pool and nothing is logged unless `deps`
 * says otherwise; with `deps.workerUrl` the app's rewrite workers run that module (the app is
 * imported with its rewrite pool's module mocked, so production code has no seam for it).
 * Its config is testConfig's.
 */
export async function startServer(
  t: Teardown & { mockImport?: unknown },
  env: Record<string, string> = {},
  db?: TestDatabase,
  deps: TestDeps = {},
): Promise<TestServer> {
  const database = db ?? (await createTestDatabase(t));
  const config = testConfig(database.url, env);
  const exportSql = connect(database.url, {
    max: config.exportConcurrency,
    applicationName: 'kbx-test-export',
    fetchTypes: false,
  });
  const workers = config.rewriteWorkers > 0 || deps.workerUrl !== undefined;
  const build = workers ? await appWithLeanWorkers(t as MockingTest, deps.workerUrl) : buildApp;
  const app = await build({
    config,
    sql: database.sql,
    exportSql,
    planSql: deps.planSql ?? database.sql,
    logger: deps.logger ?? false,
  });
  const url = await listenOnLoopback(t, app, [exportSql]);
  const cacheHits = async () => {
    const metric = await app.metrics.registry.getSingleMetric('kb_export_cache_hits_total')!.get();
    return metric.values[0]?.value ?? 0;
  };
  return { url, app, config, db: database, exportSql, cacheHits };
}

/**
 * buildApp of src/app.ts imported with the rewrite pool of lean-workers.ts, running `workerUrl`'s
 * module if given. Specifiers are absolute: tap resolves relative ones against the caller's source
 * (test/…/*.ts, through its source map), not the compiled module that runs.
 */
async function appWithLeanWorkers(t: MockingTest, workerUrl: URL | undefined): Promise<typeof buildApp> {
  const RewritePool = await leanRewritePool(t);
  class FixturePool extends RewritePool {
    constructor(size: number, options: RewritePoolOptions = {}) {
      super(size, { ...options, workerUrl });
    }
  }
  // A mock reaches the module it is given to, not the modules below it: the exporter gets the
  // pool, and the app gets that exporter.
  const exporter = await t.mockImport<typeof import('../../src/export/exporter.js')>(
    new URL('../../src/export/exporter.js', import.meta.url).href,
    {
      [new URL('../../src/export/rewrite/workers/rewrite-pool.js', import.meta.url).href]: { RewritePool: FixturePool },
    },
  );
  const mocked = await t.mockImport<typeof import('../../src/app.js')>(
    new URL('../../src/app.js', import.meta.url).href,
    {
      [new URL('../../src/export/exporter.js', import.meta.url).href]: exporter,
    },
  );
  return mocked.buildApp;
}

/**
 * Starts `app` on a random loopback port; returns its `http://127.0.0.1:<port>`. At teardown the
 * app closes, then `pools` (the ones the test made for it).
 */
/**
 * A REDIS_KEY_PREFIX of its own for each test server: with REDIS_URL, test files running at once
 * share one Redis, and one's rate limit or per-user leases must not count another's requests.
 * Tests that need one fleet of several servers give them the same prefix.
 */
export function redisKeyPrefix(): string {
  return `kbx-test-${randomBytes(4).toString('hex')}`;
}

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

/**
 * simpleSeed's user `user` and book `kb`, with `documents` documents written by PostgreSQL: id and
 * slug `<user>-<i>`, order keys in `i` order, and each of `columns` (content_str, content_html) an
 * SQL expression of `i` (1-based). For tests where a body's size is the point and its content is
 * not: no document passes through this process or the seed loader.
 */
export async function seedSizedBook(
  sql: Sql,
  user: string,
  documents: number,
  columns: Partial<Record<'content_str' | 'content_html', string>>,
): Promise<void> {
  await seed(sql, simpleSeed([], { user }));
  const names = Object.keys(columns);
  await sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status${names.map((c) => `, ${c}`).join('')})
    SELECT '${user}-' || i, 'b-${user}', '${user}-' || i, 'Doc ${user}-' || i, 'document', lpad(i::text, 7, '0'), 1${Object.values(
      columns,
    )
      .map((v) => `, ${v}`)
      .join('')}
    FROM generate_series(1, ${documents}) i`);
}
