/**
 * Everything an export needs once its request is known to be good (key, parameters, book): one
 * object built from the configuration. It sends the body, from the export cache or from a
 * snapshot, under the same rules whatever the path (decisions.md D8.10): the response's turn on
 * its connection, the per-user cap, a database slot for a snapshot only (D8.9), the writer's
 * drain floor and deadlines, a log line at each end, and the outcome for metrics.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.js';
import type { Sql } from '../db/connect.js';
import { ApiError, ClientGoneError, DependencyError } from '../errors.js';
import type { Redis } from 'ioredis';
import { ExportAdmission } from './admission/admission.js';
import { FleetAdmission, type Admitted } from './admission/fleet-admission.js';
import { UserLeases } from './admission/user-leases.js';
import { watchCause } from './failure-cause.js';
import { exportEtag, OUTPUT_FORMAT_VERSION, type Representation } from './cache/etag.js';
import { ExportCache, type Kept } from './cache/export-cache.js';
import { ChangeTokens, loadChangeTokenSecret, StandbyBehindTokenError } from './change-token.js';
import { ExportLog, type ExportEnded } from './export-log.js';
import { streamExport, type ExportSettings } from './export-stream.js';
import { sendKeptBody } from './send-kept.js';
import type { ContentEncoding } from './respond/compression.js';
import { responseTurn } from './respond/response-turn.js';
import { PlanWriter } from './rewrite/plans/plan-store.js';
import type { ChangeState } from './snapshot/changes-query.js';
import type { BookLookup } from './snapshot/query.js';
import { asDatabaseOutage } from '../db/dependency.js';
import type { FallbackReason, ReplicaSet } from '../db/replica/replica-set.js';
import type { PlanUse } from './rewrite/rewrite-stage.js';
import { RewritePool } from './rewrite/workers/rewrite-pool.js';

/**
 * Where one export reads (decisions.md D11.2, D11.3): the primary or one hot standby, chosen once
 * per request, so the book lookup behind its ETag and 304 and its snapshot read the same server.
 */
export interface ReadSource {
  /** `primary` or `replica N` (its index in DATABASE_REPLICA_URL, never a host: D10.6). */
  name: string;
  /** A hot standby: its SQLSTATE 40001 and 40P01 are recovery conflicts (D11.5). */
  standby: boolean;
  /** Its pool for the book and change state lookups. */
  lookupSql: Sql;
  /** Its pool for the export's snapshot. */
  exportSql: Sql;
}

/** One export to send: who asks, for which book at which export version (read on `source`), in which shape. */
export interface ExportTarget extends Representation {
  userId: string;
  keyId: string;
  bookSlug: string;
  encoding: ContentEncoding;
  /** The change tokens' floor the book lookup read (decisions.md D12.3): part of the export cache's key. */
  tokenFloor: string;
  source: ReadSource;
}

/** What the exporter reports for metrics (decisions.md D10.3). */
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

/**
 * Row bytes per batch of an export with HTML while rewrite workers run, measured against 256 KB,
 * 512 KB and 2 MB: the fastest, and within a few MB of the lowest peak (bench/optimisations.md).
 */
const POOL_BATCH_BYTES = 1024 * 1024;
const BATCH_BYTES = 2 * 1024 * 1024;

/** The settings of an export from the configuration, for a request with or without contentHtml. */
export function exportSettings(
  config: Config,
  includeContentHtml: boolean,
  parts: { rewritePool: RewritePool | null; plans: PlanUse | null; captureUpTo: number; changeTokens: ChangeTokens; onStandby: boolean },
): ExportSettings {
  return {
    mediaProxyPrefix: config.mediaProxyPrefix,
    batchRows: config.exportBatchSize,
    batchBytes: parts.rewritePool && includeContentHtml ? POOL_BATCH_BYTES : BATCH_BYTES,
    stallTimeoutMs: config.stallTimeoutMs,
    minDrainBytesPerS: config.minDrainBytesPerS,
    maxDurationMs: config.exportMaxDurationMs,
    dbTimeoutMs: config.dbTimeoutMs,
    captureUpTo: parts.captureUpTo,
    rewritePool: parts.rewritePool,
    offloadBytes: config.rewriteOffloadBytes,
    rewriteTimeoutMs: config.rewriteTimeoutMs,
    plans: parts.plans,
    changeTokens: parts.changeTokens,
    onStandby: parts.onStandby,
  };
}

export class Exporter {
  readonly #config: Config;
  /** Key and book lookups' pool: the change token secret is read there, never on an export slot's. */
  readonly #lookupSql: Sql;
  readonly #admission: FleetAdmission;
  readonly #cache: ExportCache;
  readonly #pool: RewritePool | null;
  readonly #planWriter: PlanWriter | null;
  readonly #plans: PlanUse | null;
  readonly #ended: ExportEnded;
  readonly #replicas: ReplicaSet | null;
  readonly #primary: ReadSource;
  #changeTokens: Promise<ChangeTokens> | null = null;

  /**
   * Starts the rewrite workers and the plan writer the configuration asks for; `ended` hears how
   * every export ended (metrics). `exportSql` has EXPORT_CONCURRENCY connections; new rewrite
   * plans are written on `planSql`; `sql` is the lookups' pool. With `replicas`, exports read from
   * a usable standby, else from the primary (decisions.md D11.2, D11.4); with `redis`, the per-user
   * cap is shared across the fleet through leases there (D11.1).
   */
  constructor(
    config: Config,
    pools: { sql: Sql; exportSql: Sql; planSql: Sql; replicas?: ReplicaSet | null; redis?: Redis | null },
    log: FastifyBaseLogger,
    ended: ExportEnded,
  ) {
    this.#config = config;
    this.#lookupSql = pools.sql;
    this.#replicas = pools.replicas ?? null;
    this.#primary = { name: 'primary', standby: false, lookupSql: pools.sql, exportSql: pools.exportSql };
    this.#ended = ended;
    const local = new ExportAdmission({
      concurrency: config.exportConcurrency,
      queueMax: config.exportQueueMax,
      queueTimeoutMs: config.exportQueueTimeoutMs,
      perUserMax: config.exportPerUserMax,
    });
    const leases = pools.redis ? new UserLeases({ redis: pools.redis, keyPrefix: config.redisKeyPrefix, perUserMax: config.exportPerUserMax, timeoutMs: config.dbTimeoutMs, log }) : null;
    this.#admission = new FleetAdmission(local, leases);
    this.#cache = new ExportCache(config.exportCacheBytes);
    this.#pool = config.rewriteWorkers > 0 ? new RewritePool(config.rewriteWorkers, { jobTimeoutMs: config.rewriteTimeoutMs, log }) : null;
    this.#planWriter = config.rewritePlans ? new PlanWriter(pools.planSql, { log, timeoutMs: config.dbTimeoutMs }) : null;
    this.#plans = this.#planWriter ? { writer: this.#planWriter, counts: { reused: 0, computed: 0 } } : null;
  }

  /**
   * Where one request reads, and its book read there: a usable standby in turn, else the primary
   * (decisions.md D11.2, D11.4). A standby that fails the lookup, or has not finished every
   * transaction that `changedSince` saw (D12.7), sends the request to the primary: counted and
   * logged. `bookOn` looks the book up on a pool (404, or a DependencyError of `where`).
   */
  async locate(
    changedSince: string | null,
    bookOn: (sql: Sql) => Promise<BookLookup>,
    log: FastifyBaseLogger,
  ): Promise<{ source: ReadSource; book: BookLookup }> {
    const picked = this.#replicas?.pick();
    if (!picked) return { source: this.#primary, book: await bookOn(this.#primary.lookupSql) };
    const source = { name: picked.name, standby: true, lookupSql: picked.sql, exportSql: picked.sql };
    let book: BookLookup;
    try {
      book = await bookOn(source.lookupSql);
    } catch (err) {
      if (!isReplicaOutage(err)) throw err;
      this.#fellBack('standby_failed', source, log, err);
      return { source: this.#primary, book: await bookOn(this.#primary.lookupSql) };
    }
    if (changedSince !== null && !(await asDependency(this.changeTokens())).answerableAbove(changedSince, book.snapshot_xmin)) {
      this.#fellBack('behind_token', source, log);
      return { source: this.#primary, book: await bookOn(this.#primary.lookupSql) };
    }
    return { source, book };
  }

  #fellBack(reason: FallbackReason, from: ReadSource, log: FastifyBaseLogger, err?: unknown): void {
    this.#replicas?.fellBack(reason);
    const why = reason === 'behind_token' ? 'it has not replayed every transaction changedSince saw' : 'it failed before the first byte';
    log.info({ replica: from.name, reason, ...(err === undefined ? {} : { err }) }, `export reads the primary: ${from.name} ${why}`);
  }

  /**
   * The change tokens of this database (decisions.md D12.1), their secret read once from it; read
   * again after a failure.
   */
  changeTokens(): Promise<ChangeTokens> {
    this.#changeTokens ??= loadChangeTokenSecret(this.#lookupSql).then(
      (secret) =>
        new ChangeTokens({
          secret,
          retentionDays: this.#config.changeRetentionDays,
          mediaProxyPrefix: this.#config.mediaProxyPrefix,
          outputFormat: OUTPUT_FORMAT_VERSION,
        }),
    );
    this.#changeTokens.catch(() => (this.#changeTokens = null));
    return this.#changeTokens;
  }

  /**
   * The ETag and change token a `HEAD` of `target` announces, for the book's change state read now
   * by `stateOn`; checks its `changedSince` as a `GET` would (400, 410), on the primary when the
   * standby cannot answer it (D12.7).
   */
  async head(
    target: ExportTarget,
    stateOn: (sql: Sql) => Promise<ChangeState>,
    bookOn: (sql: Sql) => Promise<BookLookup>,
    log: FastifyBaseLogger,
  ): Promise<{ etag: string; token: string }> {
    const tokens = await asDependency(this.changeTokens());
    const options = { excludeCategories: target.excludeCategories, includeContentHtml: target.includeContentHtml };
    let state = await stateOn(target.source.lookupSql);
    let version = target.version;
    if (target.changedSince !== null) {
      try {
        tokens.accept(target.changedSince, state, options);
      } catch (err) {
        if (!(err instanceof StandbyBehindTokenError)) throw err;
        this.#fellBack('behind_token', target.source, log);
        version = (await bookOn(this.#primary.lookupSql)).export_version;
        state = await stateOn(this.#primary.lookupSql);
        tokens.accept(target.changedSince, state, options);
      }
    }
    return { etag: this.etag({ ...target, version }), token: tokens.issue(state, options) };
  }

  /** The ETag of `target` (decisions.md D9.1). */
  etag(target: ExportTarget): string {
    return exportEtag(target, target.encoding, this.#config.mediaProxyPrefix);
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
   * Sends the export of `target` to `res`. Throws, before anything was written, ApiError (429, 503,
   * 404 when the book went meanwhile, 500), or a DependencyError (503): the caller answers with an
   * envelope. Anything later is logged here and ends in an aborted response (decisions.md D6.3).
   */
  async send(target: ExportTarget, res: ServerResponse, ctx: ExportContext): Promise<void> {
    const { userId, keyId, bookSlug, excludeCategories, includeContentHtml, format, encoding } = target;
    const fields = { userId, keyId, bookSlug, excludeCategories, includeContentHtml, format, encoding, source: target.source.name };
    const log = new ExportLog(ctx.log, fields, this.#ended);
    log.start();
    let admitted: Admitted;
    let kept: Kept | undefined;
    let changeTokens: ChangeTokens;
    try {
      await responseTurn(res, ctx.signal);
      changeTokens = await asDependency(this.changeTokens());
      // A delta is never kept: it is small, and its bytes depend on the token too.
      kept = target.changedSince === null ? this.#cache.get(target) : undefined;
      admitted = await this.#admission.acquire(userId, ctx.signal, kept === undefined);
      this.#cache.counted(kept !== undefined);
    } catch (err) {
      if (err instanceof ClientGoneError) {
        ctx.takeOver();
        res.destroy();
        log.end('client_gone', { reason: err.reason });
        ctx.log.info({ bookSlug }, 'client went away before its export started');
        return;
      }
      log.end(err instanceof ApiError ? 'rejected' : 'failed', { reason: err instanceof ApiError ? err.code : (err as Error).message });
      throw err;
    }
    let watch = watchCause(this.#primary, 0);
    const headers = (version: string, token: string) => {
      ctx.takeOver();
      res.setHeader('etag', this.etag({ ...target, version }));
      res.setHeader('export-change-token', token);
    };
    try {
      if (kept !== undefined) {
        const limits = { stallTimeoutMs: this.#config.stallTimeoutMs, minDrainBytesPerS: this.#config.minDrainBytesPerS, maxDurationMs: this.#config.exportMaxDurationMs };
        const sent = await sendKeptBody(kept, target.version, target, res, limits, headers, admitted.lost);
        const end = { cached: true, count: countOf(kept.body), bytes: sent.bytes };
        if (sent.outcome === 'complete') log.end('complete', end);
        else log.end('client_gone', { ...end, ...(sent.reason ? { reason: sent.reason } : {}) });
        return;
      }
      const settings = exportSettings(this.#config, includeContentHtml, {
        rewritePool: this.#pool,
        plans: this.#plans,
        captureUpTo: target.changedSince === null ? this.#cache.maxEntryBytes : 0,
        changeTokens,
        onStandby: target.source.standby,
      });
      let source = target.source;
      let result;
      for (;;) {
        watch = watchCause(source, this.#config.dbTimeoutMs);
        try {
          result = await streamExport(source.exportSql, { ...target }, res, { ...settings, onStandby: source.standby }, headers, admitted.lost);
          break;
        } catch (err) {
          // Nothing was sent yet: the primary answers instead (D11.4, D12.7).
          if (source === this.#primary || res.headersSent || res.destroyed || !isStandbyFailure(err)) throw err;
          this.#fellBack(err instanceof StandbyBehindTokenError ? 'behind_token' : 'standby_failed', source, ctx.log, err);
          source = this.#primary;
          log.readFrom(source.name);
        }
      }
      if (result.body !== undefined) this.#cache.set({ ...target, version: result.version }, result.body, result.token);
      const end = { count: result.count, bytes: result.bytes };
      if (result.outcome === 'complete') log.end('complete', end);
      else log.end('client_gone', { ...end, ...(result.reason ? { reason: result.reason } : {}) });
    } catch (err) {
      if (res.headersSent || res.destroyed) {
        ctx.takeOver();
        const cause = await watch.causeOf(err);
        ctx.log.error({ err, bookSlug, cause }, 'export aborted after the first byte');
        log.end('failed', { reason: cause === 'other' ? (err as Error).message : cause, cause });
        return;
      }
      log.end('failed', { reason: err instanceof ApiError ? err.code : (err as Error).message, cause: await watch.causeOf(err) });
      throw err;
    } finally {
      admitted.release();
    }
  }

  /** Stops the rewrite workers and the plan writer. */
  async close(): Promise<void> {
    await Promise.all([this.#pool?.close(), this.#planWriter?.close()]);
  }
}

/** A standby that failed or cannot answer: the request may read the primary instead. */
function isReplicaOutage(err: unknown): boolean {
  return err instanceof DependencyError && err.dependency === 'replica';
}

/** How an export on a standby fails before its first byte when the standby is at fault: its connection counts as the database's. */
function isStandbyFailure(err: unknown): boolean {
  return err instanceof DependencyError && err.dependency !== 'redis';
}

/** `work`, a database outage in it as a DependencyError (503, decisions.md D8.5). */
async function asDependency<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw asDatabaseOutage(err, false) ?? err;
  }
}

/** Documents in a complete export body: its closing `"meta":{"count":N}}` (export-api.md 4.1 rule 8). */
function countOf(body: Buffer): number | undefined {
  const m = /"count":(\d+)\}\}\n?$/.exec(body.subarray(Math.max(0, body.length - 40)).toString('latin1'));
  return m ? Number(m[1]) : undefined;
}
