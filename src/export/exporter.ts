/**
 * Everything an export needs once the route has read its request: one object built from the
 * configuration. It verifies the caller, decides where the request reads (fallbacks included), and
 * sends the body, from the export cache or through the pipeline, under the same rules whatever the
 * path (D8.10): the response's turn on its connection, the per-user cap, a database slot
 * for a snapshot only (D8.9), the writer's drain floor and deadlines, a log line at each end, and the
 * outcome for metrics.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import type { Sql } from '../db/connect.js';
import { asDatabaseOutage } from '../db/dependency.js';
import type { ReplicaSet } from '../db/replica/replica-set.js';
import { inTransaction } from '../db/transaction.js';
import { ApiError, ClientGoneError } from '../errors.js';
import { ExportAdmission } from './admission/admission.js';
import { FleetAdmission, type Admitted } from './admission/fleet-admission.js';
import { UserLeases } from './admission/user-leases.js';
import { exportEtag, OUTPUT_FORMAT_VERSION } from './cache/etag.js';
import { cacheKey, countOf, ExportCache, isFull, type ExportCacheKey, type Kept } from './cache/export-cache.js';
import { readChangeState } from './change-state.js';
import { ChangeTokenSource, StandbyBehindTokenError, type ChangeTokens } from './change-token.js';
import { pipelineSettings, streamExport, type PipelineSettings } from './export-pipeline.js';
import { ExportLog, type ExportEnded } from './export-log.js';
import { watchCause, type CauseWatch } from './failure-cause.js';
import type { Caller, ExportRequest } from './request/export-request.js';
import type { Lookups } from './request/lookups.js';
import { responseTurn } from './respond/response-turn.js';
import type { Sent } from './respond/sent.js';
import { PlanWriter } from './rewrite/plans/plan-store.js';
import type { PlanUse } from './rewrite/rewrite-stage.js';
import { RewritePool } from './rewrite/workers/rewrite-pool.js';
import { ReadSources, type Located } from './read-sources.js';
import { sendKeptBody } from './send-kept.js';

/** What the exporter reports for metrics (D10.3). */
export interface ExportStats {
  /** Exports holding a database slot. */
  streaming: number;
  /** Exports waiting for one. */
  waiting: number;
  cacheHits: number;
  cacheMisses: number;
  rewriteWorkerRestarts: number;
  /** Flagged contentHtml spliced from a stored plan, tokenized, and what became of new plans. */
  plans: { reused: number; computed: number; written: number; dropped: number; failed: number };
}

/** How the route lends the response: `takeOver` is called once the exporter writes to it. */
export interface ExportContext {
  log: FastifyBaseLogger;
  /** Aborts when the client goes away (request/client-gone.ts). */
  signal: AbortSignal;
  takeOver: () => void;
}

/** How a started export went, for its last log line. */
interface Outcome extends Sent {
  count?: number | undefined;
  cached?: boolean;
}

export class Exporter {
  readonly #config: Config;
  readonly #lookups: Lookups;
  readonly #admission: FleetAdmission;
  readonly #cache: ExportCache;
  readonly #pool: RewritePool | null;
  readonly #planWriter: PlanWriter | null;
  readonly #plans: PlanUse | null;
  /** By includeContentHtml. */
  readonly #settings: { withHtml: PipelineSettings; withoutHtml: PipelineSettings };
  readonly #ended: ExportEnded;
  readonly #sources: ReadSources;
  readonly #tokens: ChangeTokenSource;

  /**
   * Starts the rewrite workers and the plan writer the configuration asks for; `ended` hears how
   * every export ended (metrics). `exportSql` has EXPORT_CONCURRENCY connections; new rewrite
   * plans are written on `planSql`; `lookups` reads keys and books (on `sql`, the primary's lookup
   * pool, or a standby's). With `replicas`, exports read from a usable standby, else from the primary
   * (D11.2, D11.4); with `redis`, the per-user cap is shared across the fleet (D11.1).
   */
  constructor(
    config: Config,
    pools: { sql: Sql; exportSql: Sql; planSql: Sql; replicas?: ReplicaSet | null; redis?: Redis | null },
    lookups: Lookups,
    log: FastifyBaseLogger,
    ended: ExportEnded,
  ) {
    this.#config = config;
    this.#lookups = lookups;
    const primary = { name: 'primary', standby: false, lookupSql: pools.sql, exportSql: pools.exportSql };
    this.#tokens = new ChangeTokenSource(pools.sql, {
      retentionDays: config.changeRetentionDays,
      mediaProxyPrefix: config.mediaProxyPrefix,
      outputFormat: OUTPUT_FORMAT_VERSION,
    });
    this.#sources = new ReadSources(primary, pools.replicas ?? null);
    this.#ended = ended;
    const local = new ExportAdmission({
      concurrency: config.exportConcurrency,
      queueMax: config.exportQueueMax,
      queueTimeoutMs: config.exportQueueTimeoutMs,
      perUserMax: config.exportPerUserMax,
    });
    const leases = pools.redis
      ? new UserLeases({
          redis: pools.redis,
          keyPrefix: config.redisKeyPrefix,
          perUserMax: config.exportPerUserMax,
          timeoutMs: config.dbTimeoutMs,
          log,
        })
      : null;
    this.#admission = new FleetAdmission(local, leases);
    this.#cache = new ExportCache(config.exportCacheBytes);
    this.#pool =
      config.rewriteWorkers > 0
        ? new RewritePool(config.rewriteWorkers, { jobTimeoutMs: config.rewriteTimeoutMs, log })
        : null;
    this.#planWriter = config.rewritePlans
      ? new PlanWriter(pools.planSql, { log, timeoutMs: config.dbTimeoutMs })
      : null;
    this.#plans = this.#planWriter ? { writer: this.#planWriter, counts: { reused: 0, computed: 0 } } : null;
    this.#settings = {
      withHtml: pipelineSettings(config, true, this.#pool, this.#plans),
      withoutHtml: pipelineSettings(config, false, this.#pool, this.#plans),
    };
  }

  /** The caller of an `Authorization` header, verified on the primary. Throws ApiError INVALID_API_KEY (D5.2). */
  caller(authorization: string | string[] | undefined): Promise<Caller> {
    return this.#lookups.caller(authorization);
  }

  /**
   * Where `request` reads, and its book read there (read-sources.ts). Throws ApiError BOOK_NOT_FOUND,
   * or a DependencyError (503).
   */
  locate(request: ExportRequest, log: FastifyBaseLogger): Promise<Located> {
    const bookOn = (sql: Sql) => this.#lookups.book(request.caller.userId, request.bookSlug, sql);
    return this.#sources.locate(request, bookOn, () => asDependency(this.changeTokens()), log);
  }

  /** The ETag of what `request` asks for at export version `version` (D9.1). */
  etag(request: ExportRequest, bookId: string, version: string): string {
    return exportEtag(request, bookId, version, this.#config.mediaProxyPrefix);
  }

  /**
   * The headers of its own a `HEAD` of `request` announces (ETag, change token, media prefix: D9.1,
   * D12.1, D13.3), for the book's change state read now;
   * checks its `changedSince` as a `GET` would (400, 410), on the primary when the standby cannot
   * answer it (D12.7).
   */
  async head(request: ExportRequest, located: Located, log: FastifyBaseLogger): Promise<Record<string, string>> {
    const tokens = await asDependency(this.changeTokens());
    const stateOn = (sql: Sql) =>
      this.#lookups.read(sql, 'change state', (on) =>
        inTransaction(on, (tx) => readChangeState((text, params) => tx.unsafe(text, params), located.book.id), {
          mode: 'ISOLATION LEVEL REPEATABLE READ READ ONLY',
        }),
      );
    let state = await stateOn(located.source.lookupSql);
    let version = located.book.export_version;
    if (request.changedSince !== null) {
      try {
        tokens.accept(request.changedSince, state, request.options);
      } catch (err) {
        if (!(err instanceof StandbyBehindTokenError)) throw err;
        this.#sources.fellBack('behind_token', located.source, log);
        version = (await this.#lookups.book(request.caller.userId, request.bookSlug, this.#sources.primary.lookupSql))
          .export_version;
        state = await stateOn(this.#sources.primary.lookupSql);
        tokens.accept(request.changedSince, state, request.options);
      }
    }
    return {
      etag: this.etag(request, located.book.id, version),
      'export-change-token': tokens.issue(state, request.options),
      'export-media-prefix': this.#config.mediaProxyPrefix,
    };
  }

  /**
   * The change tokens of this database (D12.1), their secret read once from it; read
   * again after a failure.
   */
  changeTokens(): Promise<ChangeTokens> {
    return this.#tokens.get();
  }

  stats(): ExportStats {
    const written = this.#planWriter?.counts;
    return {
      streaming: this.#admission.streaming,
      waiting: this.#admission.waiting,
      cacheHits: this.#cache.hits,
      cacheMisses: this.#cache.misses,
      rewriteWorkerRestarts: this.#pool?.restarts ?? 0,
      plans: {
        reused: this.#plans?.counts.reused ?? 0,
        computed: this.#plans?.counts.computed ?? 0,
        written: written?.written ?? 0,
        dropped: written?.dropped ?? 0,
        failed: written?.failed ?? 0,
      },
    };
  }

  /**
   * Sends the export `request` asks for to `res`. Throws, before anything was written, ApiError (429,
   * 503, 404 when the book went meanwhile, 500), or a DependencyError (503): the caller answers with
   * an envelope. Anything later is logged here and ends in an aborted response (D6.3).
   */
  async send(request: ExportRequest, located: Located, res: ServerResponse, ctx: ExportContext): Promise<void> {
    const { caller, bookSlug, options, format, encoding } = request;
    const log = new ExportLog(
      ctx.log,
      { ...caller, bookSlug, ...options, format, encoding, source: located.source.name },
      this.#ended,
    );
    log.start();
    const key = cacheKey(request, located.book);
    const admission = await this.#admit(request, key, res, ctx, log);
    if (admission === null) return;
    const { admitted, kept, changeTokens } = admission;
    const watch = { current: watchCause(this.#sources.primary, 0) };
    const onHeaders = (version: string, token: string) => {
      ctx.takeOver();
      res.setHeader('etag', this.etag(request, located.book.id, version));
      res.setHeader('export-change-token', token);
      res.setHeader('export-media-prefix', this.#config.mediaProxyPrefix);
    };
    try {
      const outcome =
        kept !== undefined
          ? {
              ...(await sendKeptBody(
                kept,
                located.book.export_version,
                request,
                res,
                this.#writerLimits(),
                onHeaders,
                admitted.lost,
              )),
              cached: true,
              count: countOf(kept.body),
            }
          : await this.#stream(request, located, res, {
              ctx,
              log,
              watch,
              changeTokens,
              onHeaders,
              stop: admitted.lost,
              key,
            });
      ended(log, outcome);
    } catch (err) {
      await this.#failed(err, res, ctx, log, watch.current, bookSlug);
    } finally {
      admitted.release();
    }
  }

  /**
   * The response's turn on its connection, the change tokens, a kept body if one serves, and a place
   * (D8.1, D8.2, D8.9); null when the client went meanwhile (logged). Throws as send() does, logged.
   */
  async #admit(
    request: ExportRequest,
    key: ExportCacheKey,
    res: ServerResponse,
    ctx: ExportContext,
    log: ExportLog,
  ): Promise<{ admitted: Admitted; kept: Kept | undefined; changeTokens: ChangeTokens } | null> {
    try {
      await responseTurn(res, ctx.signal);
      const changeTokens = await asDependency(this.changeTokens());
      // Only a full export is kept: a delta's bytes depend on its token, a resumed one's on its position.
      const kept = isFull(request) ? this.#cache.get(key) : undefined;
      const admitted = await this.#admission.acquire(request.caller.userId, ctx.signal, kept === undefined);
      this.#cache.counted(kept !== undefined);
      return { admitted, kept, changeTokens };
    } catch (err) {
      if (err instanceof ClientGoneError) {
        ctx.takeOver();
        res.destroy();
        log.end('client_gone', { reason: err.reason });
        ctx.log.info({ bookSlug: request.bookSlug }, 'client went away before its export started');
        return null;
      }
      log.end(err instanceof ApiError ? 'rejected' : 'failed', {
        reason: err instanceof ApiError ? err.code : (err as Error).message,
      });
      throw err;
    }
  }

  /** Stops the rewrite workers and the plan writer. */
  async close(): Promise<void> {
    await Promise.all([this.#pool?.close(), this.#planWriter?.close()]);
  }

  /** Through the pipeline from the located source; a standby that fails before the first byte hands it to the primary (D11.4, D12.7). */
  async #stream(
    request: ExportRequest,
    located: Located,
    res: ServerResponse,
    run: {
      ctx: ExportContext;
      log: ExportLog;
      watch: { current: CauseWatch };
      changeTokens: ChangeTokens;
      onHeaders: (version: string, token: string) => void;
      stop: AbortSignal | null;
      key: ExportCacheKey;
    },
  ): Promise<Outcome> {
    const settings = request.options.includeContentHtml ? this.#settings.withHtml : this.#settings.withoutHtml;
    const captureUpTo = isFull(request) ? this.#cache.maxEntryBytes : 0;
    for (let source = located.source; ;) {
      run.watch.current = watchCause(source, this.#config.dbTimeoutMs);
      try {
        const { changeTokens, onHeaders, stop } = run;
        const result = await streamExport(request, res, settings, {
          sql: source.exportSql,
          onStandby: source.standby,
          changeTokens,
          captureUpTo,
          onHeaders,
          stop,
        });
        if (result.body !== undefined)
          this.#cache.set({ ...run.key, version: result.version }, result.body, result.token);
        return result;
      } catch (err) {
        // Nothing was sent yet: the primary answers instead (D11.4, D12.7).
        if (res.headersSent || res.destroyed || !this.#sources.retriesOnPrimary(source, err, run.ctx.log)) throw err;
        source = this.#sources.primary;
        run.log.readFrom(source.name);
      }
    }
  }

  /** An export that failed: aborted and logged here after its first byte (D6.3), else logged and rethrown for an envelope. */
  async #failed(
    err: unknown,
    res: ServerResponse,
    ctx: ExportContext,
    log: ExportLog,
    watch: CauseWatch,
    bookSlug: string,
  ): Promise<void> {
    if (res.headersSent || res.destroyed) {
      ctx.takeOver();
      const cause = await watch.causeOf(err);
      ctx.log.error({ err, bookSlug, cause }, 'export aborted after the first byte');
      log.end('failed', { reason: cause === 'other' ? (err as Error).message : cause, cause });
      return;
    }
    log.end('failed', {
      reason: err instanceof ApiError ? err.code : (err as Error).message,
      cause: await watch.causeOf(err),
    });
    throw err;
  }

  #writerLimits() {
    const { stallTimeoutMs, minDrainBytesPerS, exportMaxDurationMs: maxDurationMs } = this.#config;
    return { stallTimeoutMs, minDrainBytesPerS, maxDurationMs };
  }
}

/** The one place an export's end is written, whichever way its body was sent. */
function ended(log: ExportLog, o: Outcome): void {
  log.end(o.outcome, {
    ...(o.cached ? { cached: true } : {}),
    count: o.count,
    bytes: o.bytes,
    ...(o.reason ? { reason: o.reason } : {}),
  });
}

/** `work`, a database outage in it as a DependencyError (503, D8.5). */
async function asDependency<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw asDatabaseOutage(err, false) ?? err;
  }
}
