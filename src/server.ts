/**
 * `kb-export serve`: the only place that creates, listens and closes. Checks the schema is current
 * (or migrates, when asked to), runs the caller's preparation (the demo's seeding), listens, and on
 * SIGTERM/SIGINT lets running exports finish within the grace period before closing the pools and
 * the embedded PostgreSQL.
 */
import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { connect } from './db/connect.js';
import { openDatabase } from './db/database.js';
import { assertSchemaCurrent, migrate } from './db/migrate.js';
import type { Sql } from './db/connect.js';
import { startChangePruning } from './export/change-retention.js';
import { trackUnusedConnections } from './http/shutdown.js';
import { serveMetrics } from './observe/metrics.js';
import type { Server } from 'node:http';
import type { FastifyInstance } from 'fastify';

export interface ServeOptions {
  /** Apply pending migrations before serving (`serve --migrate`, MIGRATE_ON_START); otherwise a schema that is behind stops start-up. */
  migrate: boolean;
  /**
   * Runs once the schema is current and before the server listens, on a connection of its own,
   * with whether the database is the embedded one (`serve --demo` seeds the demo there: the tools
   * stay out of the server). What it returns is written to stdout once the server listens, given
   * its `http://host:port`.
   */
  prepare?: (sql: Sql, embedded: boolean) => Promise<((base: string) => string) | null>;
  /** Adds routes to the app before it listens (`serve --demo`: the demo's media, src/generate/demo-media.ts); a plain serve has none. */
  routes?: (app: FastifyInstance, config: Config) => void;
}

/** How often removals kept for deltas are pruned (src/export/change-retention.ts). */
const PRUNE_EVERY_MS = 10 * 60_000;

/** Starts the server; resolves once it listens. Throws when the database or the port is unavailable. */
export async function serve(config: Config, opts: ServeOptions): Promise<void> {
  const db = await openDatabase(config);
  // Connecting and every lookup are bounded by DB_TIMEOUT_MS; exports set their own session
  // timeouts (src/export/snapshot/snapshot.ts; D8.5, D8.7).
  const connectTimeoutS = Math.max(1, Math.ceil(config.dbTimeoutMs / 1000));
  const sql = connect(db.url, {
    max: config.poolSize,
    applicationName: 'kb-export',
    connectTimeoutS,
    statementTimeoutMs: config.dbTimeoutMs,
    fetchTypes: false,
  });
  const exportSql = connect(db.url, {
    max: config.exportConcurrency,
    applicationName: 'kb-export-export',
    connectTimeoutS,
    fetchTypes: false,
  });
  // One connection writes rewrite plans behind the exports, so it never takes a lookup's; a plan
  // lost in a crash is computed again, so its commits need not wait for the WAL flush.
  const planSql = connect(db.url, {
    max: 1,
    applicationName: 'kb-export-plans',
    connectTimeoutS,
    statementTimeoutMs: config.dbTimeoutMs,
    fetchTypes: false,
    synchronousCommit: 'off',
  });
  const closeDb = async () => {
    await Promise.allSettled([sql.end({ timeout: 5 }), exportSql.end({ timeout: 5 }), planSql.end({ timeout: 5 })]);
    await db.stop();
  };
  let banner: ((base: string) => string) | null = null;
  // Migrations and the demo's seeding (which writes arrays) run on a pool of their own, ended
  // before serving: the serving pools read no array types (src/db/connect.ts fetchTypes).
  const setup = connect(db.url, { max: 1, applicationName: 'kb-export-setup', connectTimeoutS });
  try {
    try {
      if (opts.migrate || config.migrateOnStart) await migrate(setup);
      else await assertSchemaCurrent(setup);
      banner = (await opts.prepare?.(setup, db.embedded)) ?? null;
    } finally {
      await setup.end({ timeout: 5 });
    }
  } catch (err) {
    await closeDb();
    throw err;
  }
  const app = await buildApp({ config, sql, exportSql, planSql, logger: process.stdout });
  opts.routes?.(app, config);
  const connections = trackUnusedConnections(app.server);
  let metricsServer: Server | undefined;
  let pruning: { stop(): Promise<void> } | undefined;
  // Installed before the API logs that it listens: a SIGTERM just after that line must close the
  // server as any other does, not take Node's default (an exit by the signal, nothing closed).
  const graceful = closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
    // Not ready first, so load balancers stop sending before the server stops taking requests (D10.2).
    app.readiness.shutDown();
    if (err) app.log.error({ err }, 'closing after an unexpected error');
    else app.log.info({ signal }, 'closing: running exports may finish');
    if (config.shutdownDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs));
    // A keep-alive connection whose export finishes during the grace period would otherwise hold
    // the server open until its keep-alive timeout: close each one as soon as it is idle, and
    // those that never sent a request (http/shutdown.ts).
    const sweep = setInterval(() => connections.closeIdle(), 100);
    metricsServer?.close();
    try {
      await app.close();
    } finally {
      clearInterval(sweep);
    }
    await pruning?.stop();
    await closeDb();
  });
  try {
    // Metrics first: once the API logs that it listens, everything the server serves is up.
    if (config.metricsPort !== undefined) {
      metricsServer = await serveMetrics(app.metrics, config.host, config.metricsPort);
      app.log.info({ port: config.metricsPort }, 'metrics served on their own port');
    }
    await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    graceful.uninstall();
    metricsServer?.close();
    await app.close();
    await closeDb();
    throw err;
  }
  // Removals no honoured change token can need are pruned, by one instance at a time (D12.4).
  pruning = startChangePruning(sql, {
    retentionDays: config.changeRetentionDays,
    everyMs: PRUNE_EVERY_MS,
    onPruned: (deleted) => {
      if (deleted > 0) app.log.info({ deleted }, 'removals older than CHANGE_RETENTION_DAYS pruned');
    },
    onError: (err) => app.log.warn({ err }, 'pruning the removals kept for deltas failed; it runs again later'),
  });
  if (banner) {
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : config.port;
    const host = config.host.includes(':') ? `[${config.host}]` : config.host;
    process.stdout.write(banner(`http://${host}:${port}`));
  }
}
