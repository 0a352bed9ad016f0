/**
 * The export pipeline, the one module that knows every stage, read top to bottom in the order the
 * data takes: open the snapshot (book, change token, cursor), the first batch, the pump, a delta's
 * removals, the end. Headers wait for the first batch, so an earlier failure still gets an envelope
 * (D6.2); the body ends only after the snapshot committed, else it is left unterminated (D6.3).
 */
import type { ServerResponse } from 'node:http';
import type { Config } from '../config.js';
import type { Sql } from '../db/connect.js';
import { asDatabaseOutage } from '../db/dependency.js';
import { bufferGarbage } from '../buffer-garbage.js';
import { ApiError, ClientGoneError } from '../errors.js';
import { EventLoopSlices, type Pause } from '../event-loop.js';
import { readChangeState } from './change-state.js';
import type { ChangeTokens } from './change-token.js';
import { exportHeaders } from './encode/body-format.js';
import { ExportBody } from './encode/export-body.js';
import { findBook, type BookRow } from './request/book.js';
import type { ExportRequest } from './request/export-request.js';
import { bodySink, type BodySink } from './respond/compression.js';
import { ResponseWriter } from './respond/response-writer.js';
import { stopped, type Sent } from './respond/sent.js';
import { SLOWEST_PLANNING_BYTES_PER_S } from './rewrite/plans/html-plan.js';
import { rewriteRows, type PlanUse, type RewriteStageOptions } from './rewrite/rewrite-stage.js';
import type { BatchRewrites } from './rewrite/rewrites.js';
import type { RewritePool } from './rewrite/workers/rewrite-pool.js';
import { removedQuery, sinceParams, type ChangeSince } from './snapshot/changes-query.js';
import { DocumentCursor } from './snapshot/document-cursor.js';
import { IdleAllowance } from './snapshot/idle-allowance.js';
import { rowBytes, type DocumentRow } from './snapshot/rows.js';
import { inSnapshot, type Snapshot, type SnapshotTimeouts } from './snapshot/snapshot.js';

/** What every export of one kind (with contentHtml or without) is run with, derived from the configuration once. */
export interface PipelineSettings {
  mediaProxyPrefix: string;
  batchRows: number;
  batchBytes: number;
  stallTimeoutMs: number;
  minDrainBytesPerS: number;
  maxDurationMs: number;
  dbTimeoutMs: number;
  /** Rewrite workers; null: contentHtml is planned on the event loop, in slices. */
  rewritePool: RewritePool | null;
  offloadBytes: number;
  rewriteTimeoutMs: number;
  plans: PlanUse | null;
}

/**
 * Row bytes per batch of an export with HTML while rewrite workers run, measured against 256 KB,
 * 512 KB and 2 MB: the fastest, and within a few MB of the lowest peak (bench/optimisations.md).
 */
const POOL_BATCH_BYTES = 1024 * 1024;
const BATCH_BYTES = 2 * 1024 * 1024;

/** The pipeline's settings from the configuration, for exports with or without contentHtml. */
export function pipelineSettings(
  config: Config,
  includeContentHtml: boolean,
  rewritePool: RewritePool | null,
  plans: PlanUse | null,
): PipelineSettings {
  return {
    mediaProxyPrefix: config.mediaProxyPrefix,
    batchRows: config.exportBatchSize,
    batchBytes: rewritePool && includeContentHtml ? POOL_BATCH_BYTES : BATCH_BYTES,
    stallTimeoutMs: config.stallTimeoutMs,
    minDrainBytesPerS: config.minDrainBytesPerS,
    maxDurationMs: config.exportMaxDurationMs,
    dbTimeoutMs: config.dbTimeoutMs,
    rewritePool,
    offloadBytes: config.rewriteOffloadBytes,
    rewriteTimeoutMs: config.rewriteTimeoutMs,
    plans,
  };
}

/** What one run of the pipeline is given besides its request. */
export interface PipelineRun {
  /** The read source's pool; `onStandby` when it is a hot standby's (its 40001 is a recovery conflict, D11.5). */
  sql: Sql;
  onStandby: boolean;
  changeTokens: ChangeTokens;
  /** Keep the body when it is at most this many bytes (the export cache); 0: never. */
  captureUpTo: number;
  /** Gets the snapshot's export version and change token just before the status line (D9.1, D12.1). */
  onHeaders(version: string, token: string): void;
  /** The fleet-wide lease's loss (D11.1): fails the export with its reason. */
  stop: AbortSignal | null;
}

export interface ExportResult extends Sent {
  count: number;
  /** The snapshot's export version and change token (D12.1); '' if it got no snapshot. */
  version: string;
  token: string;
  /** The whole body, when it was kept for the export cache. */
  body?: Buffer;
}

/** Rows of the first FETCH: few, so the status line goes out fast whatever the knowledge base's size. */
const FIRST_BATCH_ROWS = 16;
const IDLE_MARGIN_MS = 5000;
const REMOVED_BATCH = 1000;

/**
 * Runs the export `request` asks for into `res`. Throws ApiError or DependencyError (D8.5) before the
 * first byte; after it, destroys `res` and rethrows. A client that goes is an outcome, not an error.
 */
export function streamExport(
  request: ExportRequest,
  res: ServerResponse,
  settings: PipelineSettings,
  run: PipelineRun,
): Promise<ExportResult> {
  return new ExportPipeline(request, res, settings, run).run();
}

/** What the snapshot's first statements found, for the steps after them. */
interface Opened {
  book: BookRow;
  cursor: DocumentCursor;
  /** A delta's token, as the SQL compares with it; null for a full export. */
  since: ChangeSince | null;
  idle: IdleAllowance;
}

class ExportPipeline {
  readonly #writer: ResponseWriter;
  readonly #sink: BodySink;
  readonly #body: ExportBody;
  readonly #pause: Pause;
  readonly #timeouts: SnapshotTimeouts;
  #version = '';
  #token = '';
  #started = false;

  constructor(
    private readonly request: ExportRequest,
    private readonly res: ServerResponse,
    private readonly settings: PipelineSettings,
    private readonly job: PipelineRun,
  ) {
    const { stallTimeoutMs, minDrainBytesPerS, maxDurationMs } = settings;
    this.#writer = new ResponseWriter(res, { stallTimeoutMs, minDrainBytesPerS, maxDurationMs });
    const slices = new EventLoopSlices();
    this.#pause = () => slices.pause();
    this.#sink = bodySink(this.#writer, request.encoding);
    this.#body = new ExportBody(this.#sink, {
      flushEachBatch: request.encoding !== 'identity',
      format: request.format,
      pause: this.#pause,
      ...(job.captureUpTo > 0 ? { captureUpTo: job.captureUpTo } : {}),
    });
    this.#timeouts = {
      startMs: settings.dbTimeoutMs,
      fetchMs: Math.max(60_000, settings.dbTimeoutMs),
      lockMs: settings.dbTimeoutMs,
      // Without a drain floor the idle timeout is the snapshot-age limit (D8.5, D8.7).
      idleInTransactionMs: minDrainBytesPerS > 0 ? this.#idleNeededMs(2 * settings.batchBytes) : maxDurationMs,
    };
  }

  async run(): Promise<ExportResult> {
    const stop = this.job.stop;
    const giveUp = {
      signal: stop ? AbortSignal.any([this.#writer.signal, stop]) : this.#writer.signal,
      reason: () => (stop?.aborted ? stop.reason : new ClientGoneError(this.#writer.reason ?? 'gone')),
    };
    const streamed = bufferGarbage.streaming();
    try {
      this.#writer.check();
      await inSnapshot(this.job.sql, this.#timeouts, (snap) => this.#read(snap), giveUp);
      await this.#finish();
      const captured = this.#body.captured;
      return { ...this.#result('complete'), ...(captured ? { body: captured } : {}) };
    } catch (err) {
      return this.#failed(err);
    } finally {
      streamed();
      this.#writer.close();
    }
  }

  /** Everything read in the snapshot, in order. */
  async #read(snap: Snapshot): Promise<void> {
    const opened = await this.#open(snap);
    await this.#firstBatch(opened);
    await this.#pump(opened);
    await opened.cursor.close();
    if (opened.since !== null) await this.#removals(snap, opened.book, opened.since);
  }

  /** The book and its export version, its change state and this body's token, a delta's token checked, the cursor. */
  async #open(snap: Snapshot): Promise<Opened> {
    const { request, settings } = this;
    const lookup = <T>(text: string, params: readonly unknown[]) =>
      snap.query<T>(text, params, { timeoutMs: this.#timeouts.startMs });
    const book = await findBook((text, params) => lookup(text, params), request.caller.userId, request.bookSlug);
    if (!book) throw new ApiError('BOOK_NOT_FOUND');
    this.#version = book.export_version;
    const state = await readChangeState((text, params) => lookup(text, params), book.id);
    const tokens = this.job.changeTokens;
    const since = request.changedSince === null ? null : tokens.accept(request.changedSince, state, request.options);
    this.#token = tokens.issue(state, request.options);
    const rows = Math.max(1, Math.trunc(settings.batchRows));
    const selection =
      since !== null ? { since } : request.after !== null ? { after: request.after } : { all: true as const };
    const cursor = await DocumentCursor.open(
      snap,
      { ...request.options, withPlans: settings.plans !== null },
      book.id,
      selection,
      {
        budgetBytes: settings.batchBytes,
        maxRows: rows,
        firstRows: Math.min(rows, FIRST_BATCH_ROWS),
        startMs: this.#timeouts.startMs,
        fetchMs: this.#timeouts.fetchMs,
      },
    );
    const needed = (bytes: number) => (settings.minDrainBytesPerS > 0 ? this.#idleNeededMs(bytes) : 0);
    return {
      book,
      cursor,
      since,
      idle: new IdleAllowance(snap, this.#timeouts.idleInTransactionMs, needed, this.#timeouts.fetchMs),
    };
  }

  /** The first batch, rewritten before the status line, then sent at once: time to first byte waits for no full chunk. */
  async #firstBatch({ book, cursor, idle }: Opened): Promise<void> {
    const first = (await cursor.next()) ?? [];
    // Before its rewrite, as for every later batch: a large first document may be rewritten for long (D8.7).
    idle.allow(bytesOf(first) + 2 * this.settings.batchBytes);
    const rewrites = await this.#rewrite(first);
    this.#writer.check();
    this.job.onHeaders(this.#version, this.#token);
    this.res.writeHead(200, exportHeaders(this.request.format, this.request.encoding));
    // Not with the compressor's first bytes: a later failure is an aborted 200 either way (D6.3).
    this.res.flushHeaders();
    this.#started = true;
    this.#body.open(book);
    await this.#write(first, rewrites, 0, idle);
    await this.#body.flush();
  }

  /** The rest: while one batch is written, the next is rewritten and the two after it fetched; not around a large document. */
  async #pump({ cursor, idle }: Opened): Promise<void> {
    const budget = this.settings.batchBytes;
    let pending: { rows: DocumentRow[]; rewrites: Promise<BatchRewrites> } | null = null;
    for (let batch = await cursor.next(); batch !== null; batch = await cursor.next()) {
      this.#writer.check();
      const ahead = bytesOf(batch);
      idle.allow(ahead + 2 * budget);
      if (batch.length === 1 && ahead > budget) {
        // At most one document larger than a batch is in memory: the batch before it is written
        // first, and the cursor asks for another such document only when it is wanted (D8.4).
        if (pending !== null) await this.#write(pending.rows, await pending.rewrites, 0, idle);
        pending = null;
        await this.#write(batch, await this.#rewrite(batch), 0, idle);
        continue;
      }
      const next = { rows: batch, rewrites: this.#rewrite(batch) };
      if (pending !== null) await this.#write(pending.rows, await pending.rewrites, ahead, idle);
      pending = next;
    }
    if (pending !== null) await this.#write(pending.rows, await pending.rewrites, 0, idle);
  }

  /** A delta's removed ids (D12.2), a batch at a time, after its documents. */
  async #removals(snap: Snapshot, book: BookRow, since: ChangeSince): Promise<void> {
    const timeoutMs = this.#timeouts.fetchMs;
    const params = [book.id, ...sinceParams(since)];
    await snap.query(`DECLARE kb_export_removed NO SCROLL CURSOR FOR ${removedQuery(this.request.options)}`, params, {
      timeoutMs,
    });
    for (;;) {
      const rows = await snap.query<[Buffer][]>(`FETCH FORWARD ${REMOVED_BATCH} FROM kb_export_removed`, [], {
        raw: true,
        timeoutMs,
      });
      await this.#body.writeRemoved(rows.map((r) => r[0]));
      if (rows.length < REMOVED_BATCH) break;
    }
    await snap.query('CLOSE kb_export_removed', [], { timeoutMs });
  }

  /** `meta.count`, once the snapshot committed; the last bytes may wait in the socket long after, so `stop` still fails it. */
  async #finish(): Promise<void> {
    const finishing = this.#body.finish();
    finishing.catch(() => {});
    await Promise.race([finishing, stopped(this.job.stop)]);
    this.res.end();
  }

  #rewrite(batch: DocumentRow[]): Promise<BatchRewrites> {
    const { mediaProxyPrefix: prefix, rewritePool: pool, offloadBytes, plans } = this.settings;
    const stage: RewriteStageOptions = { prefix, pool, offloadBytes, plans, pause: this.#pause };
    const out = rewriteRows(batch, stage);
    out.catch(() => {}); // awaited by #write, or the snapshot has failed already
    return out;
  }

  /** Writes a batch; `ahead` bytes are already read behind it and wait their turn (D8.7). */
  async #write(batch: DocumentRow[], rewrites: BatchRewrites, ahead: number, idle: IdleAllowance): Promise<void> {
    idle.allow(rewrites.bytes + ahead);
    await this.#body.writeBatch(batch, rewrites);
    // Its Buffers are garbage now; V8 alone would let them pile up while the export keeps it busy.
    bufferGarbage.check();
  }

  /** How long the snapshot may idle while `bytes` are rewritten and written at the drain floor, ms (D8.7). */
  #idleNeededMs(bytes: number): number {
    const { stallTimeoutMs, minDrainBytesPerS, rewriteTimeoutMs } = this.settings;
    const rewriting = rewriteTimeoutMs + Math.ceil((bytes * 1000) / SLOWEST_PLANNING_BYTES_PER_S);
    return stallTimeoutMs + Math.ceil((bytes * 1000) / minDrainBytesPerS) + rewriting + IDLE_MARGIN_MS;
  }

  #result(outcome: Sent['outcome']): ExportResult {
    return { outcome, count: this.#body.count, bytes: this.#writer.bytes, version: this.#version, token: this.#token };
  }

  /** A client that went is an outcome; anything else aborts the response if it started (D6.3), else it is thrown as an outage or as is. */
  #failed(err: unknown): ExportResult {
    this.#sink.destroy();
    if (err instanceof ClientGoneError) {
      this.res.destroy();
      return { ...this.#result('client_gone'), reason: err.reason };
    }
    if (this.#started || this.res.headersSent) {
      this.res.destroy();
      throw err;
    }
    throw asDatabaseOutage(err, this.job.onStandby) ?? err;
  }
}

const bytesOf = (batch: readonly DocumentRow[]) => batch.reduce((n, row) => n + rowBytes(row), 0);
