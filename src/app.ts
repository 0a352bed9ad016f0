/**
 * Builds the Fastify instance: the export route with its rate limit, authentication and error
 * envelopes. Listening and closing belong to server.ts, so tests build the same app.
 */
import rateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import { parseBearer, verifyApiKey } from './auth/api-key.js';
import type { Config } from './config.js';
import type { Sql } from './db/connect.js';
import { ApiError } from './errors.js';
import { ExportCache, type ExportCacheKey } from './export/export-cache.js';
import { EXPORT_HEADERS, streamExport } from './export/export-stream.js';
import { RewritePool } from './export/rewrite-pool.js';
import { BOOK_QUERY, type BookRow } from './export/query.js';
import { frameworkErrors, installErrorHandling } from './http/error-handling.js';
import { booleanParam } from './http/params.js';

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
  /** Logger options; tests pass false. */
  logger?: boolean | object;
}

const EXPORT_PATH = '/api/v1/open/books/:bookSlug/docs';

/** The pino options: keys and Authorization headers never reach the logs. */
export function loggerOptions(level: string): object {
  return {
    level,
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.authorization'], censor: '[redacted]' },
    serializers: {
      req(req: FastifyRequest) {
        return { method: req.method, url: req.url, remoteAddress: req.ip };
      },
    },
  };
}

/** Verifies the Bearer key; returns the key's user id. Throws ApiError INVALID_API_KEY (export-api.md 5, D5.2). */
async function authenticate(sql: Sql, req: FastifyRequest): Promise<string> {
  const token = parseBearer(req.headers.authorization);
  const userId = token === null ? null : await verifyApiKey(sql, token);
  if (userId === null) throw new ApiError('INVALID_API_KEY');
  return userId;
}

/**
 * Throws ApiError BOOK_NOT_FOUND unless `userId` owns a knowledge base `slug` (export-api.md 4.1
 * rule 6, section 7 rule 1: another owner's book is indistinguishable from an unknown one).
 */
async function requireBook(sql: Sql, userId: string, slug: string): Promise<BookRow> {
  // A NUL byte can never be in a stored slug, and PostgreSQL rejects it in text parameters.
  const books = slug.includes('\0') ? [] : await sql.unsafe<BookRow[]>(BOOK_QUERY, [userId, slug]);
  if (books.length === 0) throw new ApiError('BOOK_NOT_FOUND');
  return books[0]!;
}

/**
 * Builds the app. Closing it closes the Redis client and the rewrite workers it started, not the
 * database pools or rewrite workers it was given.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, sql, exportSql } = deps;
  const cache = deps.exportCache ?? new ExportCache(config.exportCacheBytes);
  const ownPool = deps.rewritePool === undefined && config.rewriteWorkers > 0 ? new RewritePool(config.rewriteWorkers) : undefined;
  const rewritePool = deps.rewritePool ?? ownPool;
  const app = Fastify({
    logger: deps.logger ?? loggerOptions(config.logLevel),
    trustProxy:
      typeof config.trustProxy === 'number'
        ? (_addr: string, hop: number) => hop < (config.trustProxy as number)
        : config.trustProxy,
    // Long slugs must reach the handler, which answers 404 BOOK_NOT_FOUND, not the router's 404.
    // Above any path Node accepts (its 16 KiB header limit), so no slug is cut off by the router.
    routerOptions: { maxParamLength: 65_536 },
    // HEAD must not run a whole export: it gets a route of its own below.
    exposeHeadRoutes: false,
    frameworkErrors,
  });
  installErrorHandling(app);
  if (ownPool) app.addHook('onClose', () => ownPool.close());

  let redis: Redis | undefined;
  if (config.redisUrl) {
    redis = new Redis(config.redisUrl, { connectTimeout: 2000, maxRetriesPerRequest: 1, lazyConnect: false });
    app.addHook('onClose', async () => {
      await redis?.quit();
    });
  }
  // The open API lives in its own context so that one rate-limit store counts every request to it,
  // whatever the route or method (decisions.md D5.4). The limit runs on request, before the key is
  // verified (401) and before the knowledge base is looked up (404) (decisions.md D5.5).
  await app.register(async (api) => {
    await api.register(rateLimit, {
      global: true,
      max: config.rateLimitMax,
      timeWindow: config.rateLimitWindowMs,
      ...(redis ? { redis, nameSpace: 'kb-export-rl:' } : {}),
      // A limit store that fails must not let unlimited key guessing through.
      skipOnError: false,
      errorResponseBuilder: () => new ApiError('RATE_LIMITED'),
    });

    api.get<{ Params: { bookSlug: string }; Querystring: Record<string, unknown> }>(EXPORT_PATH, async (req, reply) => {
      const userId = await authenticate(sql, req);
      const excludeCategories = booleanParam(req.query, 'excludeCategories', true);
      const includeContentHtml = booleanParam(req.query, 'includeContentHtml', true);
      // Answered from the lookup pool, so a 404 never waits behind running exports for an export
      // connection; the export reads the book again inside its snapshot (decisions.md D6.1).
      const book = await requireBook(sql, userId, req.params.bookSlug);
      const key: ExportCacheKey = { bookId: book.id, version: book.export_version, excludeCategories, includeContentHtml };
      // Only a body read at the book's current export version is served (export-cache.ts).
      const cached = cache.get(key);
      if (cached !== undefined) {
        sendCached(reply, cached);
        req.log.info({ bookSlug: req.params.bookSlug, bytes: cached.length }, 'export served from memory');
        return;
      }
      await exportTo(req, reply, userId, key);
    });

    // HEAD answers what GET would (status and headers) without running the export.
    api.head<{ Params: { bookSlug: string }; Querystring: Record<string, unknown> }>(EXPORT_PATH, async (req, reply) => {
      const userId = await authenticate(sql, req);
      booleanParam(req.query, 'excludeCategories', true);
      booleanParam(req.query, 'includeContentHtml', true);
      await requireBook(sql, userId, req.params.bookSlug);
      return reply.code(200).headers(EXPORT_HEADERS).send();
    });
  });

  /** Sends a kept body on the wire exactly as a streamed export goes: same headers, chunked. */
  function sendCached(reply: FastifyReply, body: Buffer): void {
    reply.hijack();
    const res = reply.raw;
    for (const [name, value] of Object.entries(reply.getHeaders())) {
      if (value !== undefined) res.setHeader(name, value as string);
    }
    res.writeHead(200, EXPORT_HEADERS);
    // write() before end(): end(body) alone would turn the response into a Content-Length one.
    res.write(body);
    res.end();
  }

  async function exportTo(
    req: FastifyRequest<{ Params: { bookSlug: string } }>,
    reply: FastifyReply,
    userId: string,
    key: ExportCacheKey,
  ): Promise<void> {
    const { excludeCategories, includeContentHtml } = key;
    const res = reply.raw;
    // Headers the rate limit set on the reply must survive writing to the raw response.
    for (const [name, value] of Object.entries(reply.getHeaders())) {
      if (value !== undefined) res.setHeader(name, value as string);
    }
    const started = Date.now();
    let result;
    try {
      result = await streamExport(
        exportSql,
        { userId, bookSlug: req.params.bookSlug, excludeCategories, includeContentHtml },
        res,
        {
          mediaProxyPrefix: config.mediaProxyPrefix,
          batchSize: config.exportBatchSize,
          ...(rewritePool ? { rewritePool, offloadBytes: config.rewriteOffloadBytes } : {}),
          stallTimeoutMs: config.stallTimeoutMs,
          minDrainBytesPerS: config.minDrainBytesPerS,
          maxDurationMs: config.exportMaxDurationMs,
          ...(cache.maxBytes > 0 ? { captureUpTo: cache.maxEntryBytes } : {}),
          onHeaders: () => reply.hijack(),
        },
      );
    } catch (err) {
      if (!res.headersSent && !res.destroyed) throw err; // still ours to answer with an envelope
      reply.hijack();
      req.log.error({ err, bookSlug: req.params.bookSlug }, 'export aborted after the first byte');
      return;
    }
    reply.hijack();
    if (result.body !== undefined) cache.set({ ...key, version: result.version }, result.body);
    req.log.info(
      { bookSlug: req.params.bookSlug, outcome: result.outcome, count: result.count, bytes: result.bytes, ms: Date.now() - started },
      'export finished',
    );
  }

  return app;
}
