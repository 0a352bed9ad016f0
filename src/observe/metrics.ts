/**
 * Prometheus metrics (D10.3), one registry per app: exports by outcome, their duration
 * and bytes, exports streaming and waiting, the export cache's hits and misses, rewrite worker
 * restarts, rewrite plans, the database pools' use, all named `kb_export_…`, and the runtime's
 * default process and Node.js metrics under their standard names, which stock dashboards expect.
 * What the exporter counts is read from its stats when Prometheus scrapes, so the hot path pays
 * nothing for it.
 */
import { createServer, type Server } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ExportOutcome, FailureCause } from '../export/export-log.js';
import type { ExportStats } from '../export/exporter.js';

export interface MetricSources {
  /** The exporter's counts (export/exporter.ts). */
  exports: { stats(): ExportStats };
  /** Key and book lookups in flight on the lookup pool. */
  lookups: { readonly inFlight: number };
  /** Connections of the export pool (EXPORT_CONCURRENCY) and of the lookup pool (DB_POOL_SIZE). */
  exportPoolSize: number;
  lookupPoolSize: number;
}

/** The app's metrics: a registry, and what the request path reports into it. */
export class Metrics {
  readonly registry = new Registry();
  readonly #exports: Counter<'outcome'>;
  readonly #duration: Histogram<'outcome'>;
  readonly #bytes: Histogram<'outcome'>;
  readonly #failures: Counter<'cause'>;

  constructor(sources: MetricSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.#exports = new Counter({
      name: 'kb_export_exports_total',
      help: 'Exports that ended, by outcome: complete, client_gone, failed, rejected (429/503 from the export queue).',
      labelNames: ['outcome'],
      registers,
    });
    for (const outcome of ['complete', 'client_gone', 'failed', 'rejected']) this.#exports.inc({ outcome }, 0);
    this.#failures = new Counter({
      name: 'kb_export_export_failures_total',
      help:
        'Failed exports by cause: recovery_conflict (a hot standby cancelled the snapshot to replay the primary, D11.5), ' +
        'lease_lost (the fleet-wide per-user lease was lost, D11.1), other.',
      labelNames: ['cause'],
      registers,
    });
    for (const cause of ['recovery_conflict', 'lease_lost', 'other']) this.#failures.inc({ cause }, 0);
    this.#duration = new Histogram({
      name: 'kb_export_export_duration_seconds',
      help: 'Time from the start of an export to its end, seconds.',
      labelNames: ['outcome'],
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
      registers,
    });
    this.#bytes = new Histogram({
      name: 'kb_export_export_bytes',
      help: 'Body bytes an export handed to its client.',
      labelNames: ['outcome'],
      buckets: [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10],
      registers,
    });
    const stats = () => sources.exports.stats();
    new Gauge({
      name: 'kb_export_exports_streaming',
      help: 'Exports holding an export slot (and an export pool connection) now.',
      registers,
      collect() {
        this.set(stats().streaming);
      },
    });
    new Gauge({
      name: 'kb_export_exports_waiting',
      help: 'Exports waiting in the export queue now.',
      registers,
      collect() {
        this.set(stats().waiting);
      },
    });
    const counted = (name: string, help: string, read: () => number) =>
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    counted('kb_export_cache_hits_total', 'Exports served from the export cache.', () => stats().cacheHits);
    counted(
      'kb_export_cache_misses_total',
      'Exports looked up in the export cache and not found there.',
      () => stats().cacheMisses,
    );
    counted(
      'kb_export_rewrite_worker_restarts_total',
      'Rewrite workers started in place of dead ones.',
      () => stats().rewriteWorkerRestarts,
    );
    new Counter({
      name: 'kb_export_rewrite_plans_total',
      help:
        'Rewrite plans of flagged contentHtml, by outcome: reused (spliced from a stored plan, no tokenizer), computed (tokenized), ' +
        'written (stored behind the export), dropped (the write queue was full), failed (their write failed).',
      labelNames: ['outcome'],
      registers,
      collect() {
        this.reset();
        for (const [outcome, n] of Object.entries(stats().plans)) this.inc({ outcome }, n);
      },
    });
    const lookups = () => sources.lookups.inFlight;
    new Gauge({
      name: 'kb_export_db_pool_connections_in_use',
      help: 'Connections in use per pool: export (one per streaming export) and lookup (key and book lookups in flight).',
      labelNames: ['pool'],
      registers,
      collect() {
        this.set({ pool: 'export' }, stats().streaming);
        this.set({ pool: 'lookup' }, lookups());
      },
    });
    const max = new Gauge({
      name: 'kb_export_db_pool_connections_max',
      help: 'Connections each pool may open: EXPORT_CONCURRENCY and DB_POOL_SIZE.',
      labelNames: ['pool'],
      registers,
    });
    max.set({ pool: 'export' }, sources.exportPoolSize);
    max.set({ pool: 'lookup' }, sources.lookupPoolSize);
  }

  /** An export ended (export/export-log.ts). */
  exportEnded(outcome: ExportOutcome, bytes: number, ms: number, cause?: FailureCause): void {
    this.#exports.inc({ outcome });
    if (cause !== undefined) this.#failures.inc({ cause });
    this.#duration.observe({ outcome }, ms / 1000);
    this.#bytes.observe({ outcome }, bytes);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The app's metrics; src/server.ts serves them on METRICS_PORT when that is set. */
    metrics: Metrics;
  }
}

/** Answers a scrape: the registry in Prometheus's text format. */
async function exposition(metrics: Metrics): Promise<{ contentType: string; body: string }> {
  return { contentType: metrics.registry.contentType, body: await metrics.registry.metrics() };
}

/** `GET /metrics` on `app` (D10.3): no key, outside the open API's rate limit. */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics): void {
  app.get('/metrics', { exposeHeadRoute: true }, async (_req, reply) => {
    const { contentType, body } = await exposition(metrics);
    return reply.type(contentType).header('cache-control', 'no-store').send(body);
  });
}

/**
 * `/metrics` on a listener of its own (METRICS_PORT), so scrapes never share the API's port;
 * anything else there is 404. Resolves once it listens; close it with the returned server.
 */
export async function serveMetrics(metrics: Metrics, host: string, port: number): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?', 1)[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found\n');
      return;
    }
    exposition(metrics).then(
      ({ contentType, body }) =>
        res
          .writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' })
          .end(req.method === 'HEAD' ? undefined : body),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
