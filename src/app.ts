/**
 * Builds the Fastify instance: the open API behind its rate limit, admission control and error
 * envelopes. Listening and closing belong to server.ts, so tests build the same app.
 */
import type { Writable } from 'node:stream';
import rateLimit from '@fastify/rate-limit';
import underPressure from '@fastify/under-pressure';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import type { Config } from './config.js';
import type { Sql } from './db/connect.js';
import { ApiError, DependencyError, RETRY_AFTER_S } from './errors.js';
import { Exporter } from './export/exporter.js';
import { Lookups } from './export/request/lookups.js';
import { frameworkErrors, installErrorHandling, notServed } from './http/error-handling.js';
import { registerExportRoute } from './export/export-route.js';
import { EXPORT_PATH } from './http/routes.js';
import { Readiness, registerHealth, type ReadinessProbe } from './http/health.js';
import { requestIdOf } from './http/request-id.js';
import { Metrics, registerMetricsRoute } from './observe/metrics.js';
import { registerOpenApiRoute } from './http/openapi.js';
import { OutageLog } from './db/outage-log.js';
import { registerReplicaMetrics } from './db/replica/replica-metrics.js';
import { openReplicaSet } from './db/replica/replica-set.js';
import { installPreRouting, methodsExcept, preRoutingOptions } from './http/pre-routing.js';

export interface AppDeps {
  config: Config;
  /** Pool for key and book lookups. */
  sql: Sql;
  /** Pool for export transactions: its size caps concurrent exports, so they never starve lookups. */
  exportSql: Sql;
  /** Pool on which new rewrite plans are written behind the exports. */
  planSql: Sql;
  /** Where the JSON log lines go: a stream, or false for none. */
  logger: false | Writable;
}

/** The pino options: keys and Authorization headers never reach the logs. */
function loggerOptions(level: string, stream: Writable): object {
  return {
    level,
    stream,
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization'], censor: '[redacted]' },
    serializers: {
      req(req: FastifyRequest) {
        return { method: req.method, url: req.url, remoteAddress: req.ip };
      },
    },
  };
}

/**
 * The rate-limit store's client (D8.5): no offline queue, so a command fails at once
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
  redis.on('error', (err) => outages.failed('redis', err));
  redis.on('ready', () => outages.ok('redis'));
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
 * Builds the app. With DATABASE_REPLICA_URL it opens the standbys and checks them in the background
 * (D11.2, D11.4). Closing it closes the Redis client, the standbys' pools, the rewrite
 * workers and the plan writer, not the primary's pools.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, sql } = deps;
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
  // Every response carries the id its log lines have (hijacked exports copy it) (D10.5).
  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
  });
  installPreRouting(app);
  const outages = new OutageLog(app.log);
  let redis: Redis | undefined;
  if (config.redisUrl) {
    redis = await connectRedis(config.redisUrl, outages);
    app.addHook('onClose', async () => {
      redis?.disconnect();
    });
  }
  const lookups = new Lookups(sql, config.dbTimeoutMs, outages);
  // Not a readiness probe: a lost standby sends exports to the primary, it does not make the server unready (D11.7).
  const replicas = config.databaseReplicaUrls.length > 0 ? openReplicaSet(config, sql, app.log) : null;
  if (replicas) {
    await replicas.start();
    app.addHook('onClose', () => replicas.close());
  }
  // An export ends only after the app is built, metrics included.
  const exporter = new Exporter(
    config,
    { ...deps, replicas, redis: redis ?? null },
    lookups,
    app.log,
    (outcome, bytes, ms, cause) => metrics.exportEnded(outcome, bytes, ms, cause),
  );
  app.addHook('onClose', () => exporter.close());
  const metrics = new Metrics({
    exports: exporter,
    lookups,
    exportPoolSize: config.exportConcurrency,
    lookupPoolSize: config.poolSize,
  });
  if (replicas) registerReplicaMetrics(metrics.registry, replicas);
  app.decorate('metrics', metrics);
  // Outside the open API's context, so neither keyed nor rate limited (D10.1-D10.3).
  if (config.metricsPort === undefined) registerMetricsRoute(app, metrics);
  registerOpenApiRoute(app);
  const probes: ReadinessProbe[] = [{ name: 'database', check: () => sql`SELECT 1` }];
  if (redis) {
    const store = redis;
    probes.push({ name: 'redis', check: () => store.ping() });
  }
  await registerHealth(app, new Readiness(probes, config.dbTimeoutMs, outages));

  // Requests of the open API that have not yet passed the rate limit: an error thrown for one of
  // them comes from the limit's store, and is an outage of that store (D8.5).
  const beforeLimit = new WeakSet<FastifyRequest>();
  installErrorHandling(app, {
    outages,
    dependencyError: (err, req) =>
      beforeLimit.has(req) && !(err instanceof ApiError)
        ? new DependencyError('redis', `rate-limit store unavailable: ${err.message}`, { cause: err })
        : undefined,
  });

  // The open API lives in its own context so that one rate-limit store counts every request to it,
  // whatever the route or method (D5.4). The limit runs on request, before the key is
  // verified (401) and before the knowledge base is looked up (404) (D5.5).
  await app.register(async (api) => {
    api.addHook('onRequest', async (req) => {
      beforeLimit.add(req);
    });
    // A last line, not the fix: every step of an export is kept short and small (D8.8); should
    // the process still fall behind, new requests are refused until it catches up.
    if (config.maxEventLoopDelayMs > 0 || config.maxHeapUsedBytes > 0) {
      await api.register(underPressure, {
        maxEventLoopDelay: config.maxEventLoopDelayMs,
        maxHeapUsedBytes: config.maxHeapUsedBytes,
        pressureHandler: (_req, _reply, type) => {
          throw new ApiError('SERVICE_UNAVAILABLE', `The server is under load (${type}), retry later`, RETRY_AFTER_S);
        },
      });
    }
    await api.register(rateLimit, {
      global: true,
      max: config.rateLimitMax,
      timeWindow: config.rateLimitWindowMs,
      ...(redis ? { redis, nameSpace: `${config.redisKeyPrefix}-rl:` } : {}),
      // A limit store that fails must not let unlimited key guessing through (D8.5).
      skipOnError: false,
      errorResponseBuilder: () => new ApiError('RATE_LIMITED'),
    });
    // The limit's own onRequest hook is added to each route, so it runs after this context's
    // onRequest hooks: the first hook that surely runs after it is preParsing.
    api.addHook('preParsing', async (req) => {
      beforeLimit.delete(req);
      if (redis) outages.ok('redis');
    });
    registerExportRoute(api, exporter);

    // Any other method is answered 405 here, in this context, so the limit counts it (D7.4).
    api.route({ method: methodsExcept(api, ['GET', 'HEAD']), url: EXPORT_PATH, handler: notServed });
  });
  return app;
}
