/**
 * `kb-export serve`: the only place that creates, listens and closes. Checks the schema is current
 * (or migrates, when asked to), optionally seeds the demo knowledge base, listens, and on SIGTERM/SIGINT lets running exports finish within the grace
 * period before closing the pools and the embedded PostgreSQL.
 */
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { connect } from './db/connect.js';
import { openDatabase } from './db/database.js';
import { assertSchemaCurrent, migrate } from './db/migrate.js';
import type { DemoInfo } from './generate/demo.js';
import { trackUnusedConnections } from './http/shutdown.js';

/**
 * Node.js flags the server runs with (the `kb-export` shebang, `npm start`, the Dockerfile and the
 * benchmarks pass them), to keep peak RSS flat (bench/optimisations.md):
 * - V8 otherwise grows its young generation to 3 × 16 MiB under the export's allocation rate,
 *   which alone lifts peak RSS by 25–40 MB; 2 MiB semi-spaces cost no measurable throughput.
 * - After each full collection V8 lets the old generation grow by up to 4 × what survived before
 *   collecting again; the strings of rewritten HTML documents then pile up to 50+ MB of garbage.
 *   A factor of 2 takes the HTML export's peak from ~156 MB to ~120 MB for about 5 % of its speed.
 */
export const SERVER_NODE_FLAGS = ['--max-semi-space-size=2', '--heap-growing-percent=100'] as const;

/**
 * glibc malloc settings the server runs with where it is started as a service (the `kb-export`
 * shebang, the Dockerfile, the benchmarks; not `npm start`, which must also run where a shell cannot
 * prefix variables). Exporting documents of megabytes allocates and frees buffers of their size:
 * - glibc raises its mmap threshold to the size of the largest block freed (up to 32 MB), after
 *   which such buffers come from the heap, whose freed memory is not returned to the system; a
 *   fixed threshold keeps every large buffer in its own mapping, unmapped when freed.
 * - every thread that allocates (rewrite workers, libuv's pool) may get an arena of its own.
 * Together they took a run of 8 MB documents from about 226 to 206 MB of peak RSS
 * (test/faults/skewed-memory.test.ts); elsewhere (musl, macOS) the variables are ignored.
 */
export const SERVER_MALLOC_ENV = { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '131072' } as const;

export interface ServeOptions {
  /**
   * Migrate, seed the demo knowledge base into an empty embedded database and print a key and a curl
   * command. The generator is imported only then: a plain serve never loads it.
   */
  demo: boolean;
  /** Apply pending migrations before serving (`serve --migrate`, MIGRATE_ON_START); otherwise a schema that is behind stops start-up. */
  migrate?: boolean;
  /** Called with the built app before it listens, to add routes (the benchmarks' in-memory ceiling). */
  beforeListen?: (app: FastifyInstance) => void | Promise<void>;
}

/** Starts the server; resolves once it listens. Throws when the database or the port is unavailable. */
export async function serve(config: Config, opts: ServeOptions): Promise<void> {
  const db = await openDatabase(config);
  // decisions.md D8.5, D8.7: connecting and every lookup are bounded by DB_TIMEOUT_MS; exports set
  // their own session timeouts (src/export/snapshot/snapshot.ts).
  const connectTimeoutS = Math.max(1, Math.ceil(config.dbTimeoutMs / 1000));
  const sql = connect(db.url, {
    max: config.poolSize,
    applicationName: 'kb-export',
    connectTimeoutS,
    statementTimeoutMs: config.dbTimeoutMs,
    fetchTypes: false,
  });
  const exportSql = connect(db.url, { max: config.exportConcurrency, applicationName: 'kb-export-export', connectTimeoutS, fetchTypes: false });
  const closeDb = async () => {
    await Promise.allSettled([sql.end({ timeout: 5 }), exportSql.end({ timeout: 5 })]);
    await db.stop();
  };
  let demo: DemoInfo | null = null;
  // Migrations and the demo's seeding (which writes arrays) run on a pool of their own, ended
  // before serving: the serving pools read no array types (src/db/connect.ts fetchTypes).
  const setup = connect(db.url, { max: 1, applicationName: 'kb-export-setup', connectTimeoutS });
  try {
    try {
      if (opts.migrate || opts.demo || config.migrateOnStart) await migrate(setup);
      else await assertSchemaCurrent(setup);
      if (opts.demo && db.embedded) {
        const { ensureDemo } = await import('./generate/demo.js');
        demo = await ensureDemo(setup);
      }
    } finally {
      await setup.end({ timeout: 5 });
    }
  } catch (err) {
    await closeDb();
    throw err;
  }
  const app = await buildApp({ config, sql, exportSql });
  const connections = trackUnusedConnections(app.server);
  try {
    await opts.beforeListen?.(app);
    await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    await app.close();
    await closeDb();
    throw err;
  }
  closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'closing after an unexpected error');
    else app.log.info({ signal }, 'closing: running exports may finish');
    // A keep-alive connection whose export finishes during the grace period would otherwise hold
    // the server open until its keep-alive timeout: close each one as soon as it is idle, and
    // those that never sent a request (http/shutdown.ts).
    const sweep = setInterval(() => connections.closeIdle(), 100);
    try {
      await app.close();
    } finally {
      clearInterval(sweep);
    }
    await closeDb();
  });
  if (demo) {
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : config.port;
    const host = config.host.includes(':') ? `[${config.host}]` : config.host;
    process.stdout.write(
      `\nDemo knowledge base "${demo.slug}" (${demo.documents} documents) is ready.\n` +
        `API key (shown once): ${demo.key}\n\n` +
        `curl -H 'Authorization: Bearer ${demo.key}' 'http://${host}:${port}/api/v1/open/books/${demo.slug}/docs'\n\n`,
    );
  }
}
