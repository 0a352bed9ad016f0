/**
 * Builds the Fastify instance: the open API behind its rate limit, admission control and error
 * envelopes. Listening and closing belong to server.ts, so tests build the same app.
 */
import type { Writable } from 'node:stream';
import rateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import type { Config } from './config.js';
import type { Sql } from './db/connect.js';
import { DependencyError } from './db/dependency.js';
import { ApiError } from './errors.js';
import { ExportAdmission } from './export/admission.js';
import { ExportCache } from './export/export-cache.js';
import { RewritePool } from './export/rewrite/rewrite-pool.js';
import { PlanWriter } from './export/rewrite/plan-store.js';
import type { PlanUse } from './export/rewrite/html-stage.js';
import { frameworkErrors, installErrorHandling, notServed } from './http/error-handling.js';
import { registerExportRoute } from './http/export-route.js';
import { EXPORT_PATH } from './http/routes.js';
import { Readiness, registerHealth, type ReadinessProbe } from './http/health.js';
import { requestIdOf } from './http/request-id.js';
import { Metrics, registerMetricsRoute } from './observe/metrics.js';
import { registerOpenApiRoute } from './http/openapi.js';
import { OutageLog } from './http/outage-log.js';
import { installPreRouting, methodsExcept, preRoutingOptions } from './http/pre-routing.js';

export interface AppDeps {
  config: Config;
  /** Pool for key and book lookups. */
  sql: Sql;
  /** Pool for export transactions: its size caps concurrent exports, so they never starve lookups. */
  exportSql: Sql;
  /** Small export bodies kept in memory; by default one of config.exportCacheBytes. */
  exportCache?: ExportCache;
  /** Rewrite workers; by default config.rewriteWorkers of them, started (and closed) by the app. */
  rewritePool?: RewritePool;
  /** Pool on which new rewrite plans are written behind the exports (REWRITE_PLANS); `sql` by default. */
  planSql?: Sql;
  /** Where the JSON log lines go: stdout by default; false logs nothing. */
  logger?: false | Writable;
}

/** The pino options: keys and Authorization headers never reach the logs. */
function loggerOptions(level: string, stream: Writable | undefined): object {
  return {
    level,
    ...(stream === undefined ? {} : { stream }),
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization'], censor: '[redacted]' },
    serializers: {
      req(req: FastifyRequest) {
        return { method: req.method, url: req.url, remoteAddress: req.ip };
      },
    },
  };
}

/**
 * The rate-limit store's client (decisions.md D8.5): no offline queue, so a command fails at once
 * while Redis is unreachable instead of waiting for a reconnection; short connect and command
 * timeouts; reconnection attempts spaced up to 2 s; its errors logged once per outage.
 */
async function connectRedis(url: string, outages: OutageLog): Promise<Redis> {
  const redis = new Redis(url, {
    connectTimeout: 2000,
    commandTimeout: 1000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
  });
  // Without an 'error' listener ioredis prints plain-text lines outside the JSON log.
  redis.on('error', (err) => outages.failed('rate-limit store', err));
  redis.on('ready', () => outages.ok('rate-limit store'));
  // A server that starts while Redis is down still starts, and answers 503 until it is back.
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 2000);
    redis.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  return redis;
}

/**
 * Builds the app. Closing it closes the Redis client and the rewrite workers it started, not the
 * database pools or rewrite workers it was given.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, sql, exportSql } = deps;
  const cache = deps.exportCache ?? new ExportCache(config.exportCacheBytes);
  const app = Fastify({
    logger: deps.logger === false ? false : loggerOptions(config.logLevel, deps.logger),
    trustProxy:
      typeof config.trustProxy === 'number'
        ? (_addr: string, hop: number) => hop < (config.trustProxy as number)
        : config.trustProxy,
    // Long slugs must reach the handler, which answers 404 BOOK_NOT_FOUND, not the router's 404.
    // Above any path Node accepts (its 16 KiB header limit), so no slug is cut off by the router.
    routerOptions: { maxParamLength: 65_536 },
    // HEAD must not run a whole export: it gets a route of its own.
    exposeHeadRoutes: false,
    frameworkErrors,
    genReqId: requestIdOf,
    ...preRoutingOptions(config.requestTimeoutMs),
  });
  // decisions.md D10.5: every response carries the id its log lines have (hijacked exports copy it).
  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
  });
  installPreRouting(app);
  const outages = new OutageLog(app.log);
  const ownPool =
    deps.rewritePool === undefined && config.rewriteWorkers > 0
      ? new RewritePool(config.rewriteWorkers, { jobTimeoutMs: config.rewriteTimeoutMs, log: app.log })
      : undefined;
  const rewritePool = deps.rewritePool ?? ownPool;
  if (ownPool) app.addHook('onClose', () => ownPool.close());
  let plans: PlanUse | undefined;
  if (config.rewritePlans) {
    const writer = new PlanWriter(deps.planSql ?? sql, { log: app.log, timeoutMs: config.dbTimeoutMs });
    plans = { writer, counts: { reused: 0, computed: 0 } };
    app.addHook('onClose', () => writer.close());
  }

  let redis: Redis | undefined;
  if (config.redisUrl) {
    redis = await connectRedis(config.redisUrl, outages);
    app.addHook('onClose', async () => {
      redis?.disconnect();
    });
  }
  const admission = new ExportAdmission({
    concurrency: config.exportConcurrency,
    queueMax: config.exportQueueMax,
    queueTimeoutMs: config.exportQueueTimeoutMs,
    perUserMax: config.exportPerUserMax,
  });
  const metrics = new Metrics({
    admission,
    cache,
    rewritePool,
    plans,
    exportPoolSize: config.exportConcurrency,
    lookupPoolSize: config.poolSize,
  });
  app.decorate('metrics', metrics);
  // decisions.md D10.1-D10.3: outside the open API's context, so neither keyed nor rate limited.
  if (config.metricsPort === undefined) registerMetricsRoute(app, metrics);
  registerOpenApiRoute(app);
  const probes: ReadinessProbe[] = [{ name: 'database', check: () => sql`SELECT 1` }];
  if (redis) {
    const store = redis;
    probes.push({ name: 'rate-limit store', check: () => store.ping() });
  }
  await registerHealth(app, new Readiness(probes, config.dbTimeoutMs));

  // Requests of the open API that have not yet passed the rate limit: an error thrown for one of
  // them comes from the limit's store, and is an outage of that store (decisions.md D8.5).
  const beforeLimit = new WeakSet<FastifyRequest>();
  installErrorHandling(app, {
    outages,
    dependencyError: (err, req) =>
      beforeLimit.has(req) && !(err instanceof ApiError)
        ? new DependencyError('rate-limit store', `rate-limit store unavailable: ${err.message}`, { cause: err })
        : undefined,
  });

  // The open API lives in its own context so that one rate-limit store counts every request to it,
  // whatever the route or method (decisions.md D5.4). The limit runs on request, before the key is
  // verified (401) and before the knowledge base is looked up (404) (decisions.md D5.5).
  await app.register(async (api) => {
    api.addHook('onRequest', async (req) => {
      beforeLimit.add(req);
    });
    await api.register(rateLimit, {
      global: true,
      max: config.rateLimitMax,
      timeWindow: config.rateLimitWindowMs,
      ...(redis ? { redis, nameSpace: 'kb-export-rl:' } : {}),
      // decisions.md D8.5: a limit store that fails must not let unlimited key guessing through.
      skipOnError: false,
      errorResponseBuilder: () => new ApiError('RATE_LIMITED'),
    });
    // The limit's own onRequest hook is added to each route, so it runs after this context's
    // onRequest hooks: the first hook that surely runs after it is preParsing.
    api.addHook('preParsing', async (req) => {
      beforeLimit.delete(req);
      if (redis) outages.ok('rate-limit store');
    });
    registerExportRoute(api, {
      config,
      sql,
      exportSql,
      cache,
      admission,
      metrics,
      outages,
      rewritePool,
      plans,
    });

    // Any other method is answered 405 here, in this context, so the limit counts it (decisions.md D7.4).
    api.route({ method: methodsExcept(api, ['GET', 'HEAD']), url: EXPORT_PATH, handler: notServed });
  });
  return app;
}
