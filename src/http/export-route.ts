/**
 * The open API's one operation, `GET` (and `HEAD`) `/api/v1/open/books/{bookSlug}/docs`
 * (export-api.md 4.1), from an authenticated request to a streamed body: key (401), query
 * parameters (400), knowledge base (404), the export cache, the user's cap (429), the export queue
 * (503), then the export pipeline (src/export/export-stream.ts). The rate limit runs before all of
 * this (app.ts, decisions.md D5.5).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { parseBearer, verifyApiKey } from '../auth/api-key.js';
import type { Config } from '../config.js';
import type { Sql } from '../db/connect.js';
import { asDatabaseOutage, withTimeout } from '../db/dependency.js';
import { ApiError } from '../errors.js';
import type { ExportAdmission } from '../export/admission.js';
import type { ExportCache, ExportCacheKey } from '../export/export-cache.js';
import { streamExport } from '../export/export-stream.js';
import { exportHeaders, MEDIA_TYPES } from '../export/encode/body-format.js';
import { bodyFormatOf, contentEncodingOf } from './negotiate.js';
import { compressWhole, type ContentEncoding } from '../export/respond/compression.js';
import { findBook, type BookRow } from '../export/snapshot/query.js';
import { EXPORT_PATH } from './routes.js';
import { exportEtag, ifNoneMatchHits } from './etag.js';
import { ExportLog } from './export-log.js';
import type { Metrics } from '../observe/metrics.js';
import { ClientGoneError } from '../export/respond/response-writer.js';
import type { RewritePool } from '../export/rewrite/rewrite-pool.js';
import type { PlanUse } from '../export/rewrite/html-stage.js';
import { watchClient } from './client-gone.js';
import type { OutageLog } from './outage-log.js';
import { booleanParam } from './params.js';
import { refuseBody } from './pre-routing.js';

/** The export's route, as Fastify writes it. */

interface ExportRouteDeps {
  config: Config;
  /** Pool for key and book lookups. */
  sql: Sql;
  /** Pool for export snapshots: EXPORT_CONCURRENCY connections. */
  exportSql: Sql;
  cache: ExportCache;
  admission: ExportAdmission;
  metrics: Metrics;
  outages: OutageLog;
  rewritePool: RewritePool | undefined;
  /** Stored rewrite plans, unless REWRITE_PLANS is off. */
  plans: PlanUse | undefined;
}

type ExportRoute = { Params: { bookSlug: string }; Querystring: Record<string, unknown> };
type ExportRequest = FastifyRequest<ExportRoute>;

/** Registers GET and HEAD of the export path on `api` (a context whose hooks run first). */
export function registerExportRoute(api: FastifyInstance, deps: ExportRouteDeps): void {
  const { config, sql, exportSql, cache, admission, metrics, outages, rewritePool, plans } = deps;

  /** A lookup on the lookup pool, bounded in time; an outage becomes a DependencyError (D8.5). */
  async function lookup<T>(work: () => Promise<T>, what: string): Promise<T> {
    try {
      const result = await metrics.countLookup(() => withTimeout(work(), config.dbTimeoutMs, 'database', what));
      outages.ok('database');
      return result;
    } catch (err) {
      throw asDatabaseOutage(err) ?? err;
    }
  }

  /** The key's user and key ids. Throws ApiError INVALID_API_KEY (export-api.md 5, decisions.md D5.2). */
  async function authenticate(req: FastifyRequest): Promise<{ userId: string; keyId: string }> {
    const token = parseBearer(req.headers.authorization);
    const caller = token === null ? null : await lookup(() => verifyApiKey(sql, token), 'API key lookup');
    if (caller === null) throw new ApiError('INVALID_API_KEY');
    return caller;
  }

  /**
   * The knowledge base `slug` of `userId`. Throws ApiError BOOK_NOT_FOUND otherwise (export-api.md
   * 4.1 rule 6, section 7 rule 1: another owner's book is indistinguishable from an unknown one).
   * Answered from the lookup pool, so a 404 never waits behind running exports.
   */
  async function requireBook(userId: string, slug: string): Promise<BookRow> {
    const book = await lookup(() => findBook((text, params) => sql.unsafe<BookRow[]>(text, params), userId, slug), 'book lookup');
    if (book === undefined) throw new ApiError('BOOK_NOT_FOUND');
    return book;
  }

  /**
   * Checks of export-api.md 4.1 in the order of decisions.md D5.5; returns the caller, the cache key
   * and the Content-Encoding (D9.3).
   */
  async function admit(req: ExportRequest): Promise<{ userId: string; keyId: string; key: ExportCacheKey; encoding: ContentEncoding }> {
    const { userId, keyId } = await authenticate(req);
    const excludeCategories = booleanParam(req.query, 'excludeCategories', true);
    const includeContentHtml = booleanParam(req.query, 'includeContentHtml', true);
    const book = await requireBook(userId, req.params.bookSlug);
    const format = bodyFormatOf(req.headers);
    const key = { bookId: book.id, version: book.export_version, excludeCategories, includeContentHtml, format };
    return { userId, keyId, key, encoding: contentEncodingOf(req.headers) };
  }

  /** The export's ETag at export version `version` (decisions.md D9.1). */
  function etagOf(key: ExportCacheKey, encoding: ContentEncoding, version: string): string {
    return exportEtag({ ...key, version, encoding, mediaProxyPrefix: config.mediaProxyPrefix, format: MEDIA_TYPES[key.format ?? 'json'] });
  }

  /**
   * decisions.md D9.2: 304 when the client holds the current body, after the rate limit, the key
   * and the knowledge base were checked and before any snapshot or export slot is taken.
   */
  function notModified(req: ExportRequest, reply: FastifyReply, key: ExportCacheKey, encoding: ContentEncoding): boolean {
    const etag = etagOf(key, encoding, key.version);
    if (!ifNoneMatchHits(req.headers['if-none-match'], etag)) return false;
    const { 'cache-control': cacheControl, vary } = exportHeaders(key.format ?? 'json');
    void reply.code(304).headers({ etag, 'cache-control': cacheControl, vary }).send();
    return true;
  }

  api.get<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const client = watchClient(reply.raw);
    let log: ExportLog | undefined;
    try {
      const { userId, keyId, key, encoding } = await admit(req);
      if (notModified(req, reply, key, encoding)) return;
      const { excludeCategories, includeContentHtml } = key;
      const format = key.format ?? 'json';
      const fields = { userId, keyId, bookSlug: req.params.bookSlug, excludeCategories, includeContentHtml, format, encoding };
      log = new ExportLog(req.log, fields, metrics);
      log.start();
      // Only a body read at the book's current export version is served (export-cache.ts).
      const cached = cache.get(key);
      if (cached !== undefined) {
        reply.raw.setHeader('etag', etagOf(key, encoding, key.version));
        const sent = sendCached(reply, cached, key, encoding);
        log.end('complete', { cached: true, count: countOf(cached), bytes: sent });
        return;
      }
      let release: () => void;
      try {
        release = await admission.acquire(userId, client.signal);
      } catch (err) {
        if (err instanceof ApiError) log.end('rejected', { reason: err.code });
        throw err;
      }
      try {
        client.dispose(); // from here the export's ResponseWriter watches the client
        await exportTo(req, reply, userId, key, encoding, log);
      } finally {
        release();
      }
    } catch (err) {
      if (!(err instanceof ClientGoneError)) {
        log?.end('failed', { reason: err instanceof ApiError ? err.code : (err as Error).message });
        throw err;
      }
      reply.hijack();
      reply.raw.destroy();
      log?.end('client_gone', { reason: err.reason });
      req.log.info({ bookSlug: req.params.bookSlug }, 'client went away before its export started');
    } finally {
      client.dispose();
    }
  });

  // HEAD answers what GET would (status and headers) without running the export.
  api.head<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const { key, encoding } = await admit(req);
    if (notModified(req, reply, key, encoding)) return reply;
    return reply.code(200).headers({ ...exportHeaders(key.format ?? 'json', encoding), etag: etagOf(key, encoding, key.version) }).send();
  });

  /**
   * Sends a kept body on the wire exactly as a streamed export goes: same headers, chunked,
   * compressed as negotiated. Returns the bytes sent.
   */
  function sendCached(reply: FastifyReply, body: Buffer, key: ExportCacheKey, encoding: ContentEncoding): number {
    reply.hijack();
    const res = reply.raw;
    copyReplyHeaders(reply);
    res.writeHead(200, exportHeaders(key.format ?? 'json', encoding));
    const sent = compressWhole(body, encoding);
    // write() before end(): end(body) alone would turn the response into a Content-Length one.
    res.write(sent);
    res.end();
    return sent.length;
  }

  async function exportTo(
    req: ExportRequest,
    reply: FastifyReply,
    userId: string,
    key: ExportCacheKey,
    encoding: ContentEncoding,
    log: ExportLog,
  ): Promise<void> {
    const { excludeCategories, includeContentHtml, format } = key;
    const res = reply.raw;
    copyReplyHeaders(reply);
    let result;
    try {
      const request = { userId, bookSlug: req.params.bookSlug, excludeCategories, includeContentHtml, format, encoding };
      result = await streamExport(exportSql, request, res, {
        mediaProxyPrefix: config.mediaProxyPrefix,
        batchSize: config.exportBatchSize,
        ...(rewritePool ? { rewritePool, offloadBytes: config.rewriteOffloadBytes } : {}),
        ...(plans ? { plans } : {}),
        stallTimeoutMs: config.stallTimeoutMs,
        minDrainBytesPerS: config.minDrainBytesPerS,
        maxDurationMs: config.exportMaxDurationMs,
        dbTimeoutMs: config.dbTimeoutMs,
        ...(cache.maxBytes > 0 ? { captureUpTo: cache.maxEntryBytes } : {}),
        onHeaders: (version) => {
          reply.hijack();
          res.setHeader('etag', etagOf(key, encoding, version));
        },
      });
    } catch (err) {
      if (!res.headersSent && !res.destroyed) throw err; // still ours to answer with an envelope
      reply.hijack();
      req.log.error({ err, bookSlug: req.params.bookSlug }, 'export aborted after the first byte');
      log.end('failed', { reason: (err as Error).message });
      return;
    }
    reply.hijack();
    if (result.body !== undefined) cache.set({ ...key, version: result.version }, result.body);
    const ended = { count: result.count, bytes: result.bytes };
    if (result.outcome === 'complete') log.end('complete', ended);
    else log.end('client_gone', { ...ended, ...(result.reason ? { reason: result.reason } : {}) });
  }
}

/** Documents in a complete export body: its closing `"meta":{"count":N}}` (export-api.md 4.1 rule 8). */
function countOf(body: Buffer): number | undefined {
  const m = /"count":(\d+)\}\}$/.exec(body.subarray(Math.max(0, body.length - 40)).toString('latin1'));
  return m ? Number(m[1]) : undefined;
}

/** Headers set on the reply (the rate limit's) must survive writing to the raw response. */
function copyReplyHeaders(reply: FastifyReply): void {
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) reply.raw.setHeader(name, value as string);
  }
}
