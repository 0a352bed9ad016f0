/**
 * The export pipeline, the one module that knows every stage. Headers wait for the first batch, so an
 * earlier failure gets an envelope (D6.2); the body ends only after the commit, else unterminated (D6.3).
 */
import type { ServerResponse } from 'node:http';
import type { Sql } from '../db/connect.js';
import { asDatabaseOutage } from '../db/dependency.js';
import { ApiError, ClientGoneError, type GoneReason } from '../errors.js';
import { EventLoopSlices } from '../event-loop.js';
import { exportHeaders, type BodyFormat } from './encode/body-format.js';
import type { BatchRewrites } from './encode/document-encoder.js';
import { ExportBody } from './encode/export-body.js';
import type { ChangeTokens } from './change-token.js';
import { rowBytes, type DocumentRow } from './encode/rows.js';
import { bodySink, type ContentEncoding } from './respond/compression.js';
import { ResponseWriter } from './respond/response-writer.js';
import { SLOWEST_PLANNING_BYTES_PER_S } from './rewrite/plans/html-plan.js';
import { rewriteRows, type PlanUse } from './rewrite/rewrite-stage.js';
import type { RewritePool } from './rewrite/workers/rewrite-pool.js';
import { DocumentCursor } from './snapshot/document-cursor.js';
import { readChangeState, removedQuery, sinceParams } from './snapshot/changes-query.js';
import { findBook, type DocumentQueryOptions } from './snapshot/query.js';
import { inSnapshot, type Snapshot, type SnapshotTimeouts } from './snapshot/snapshot.js';

export interface ExportRequest extends DocumentQueryOptions {
  userId: string;
  bookSlug: string;
  format: BodyFormat;
  encoding: ContentEncoding;
  /** Only what changed since this change token's export, and what left it (decisions.md D12.2); null: all. */
  changedSince: string | null;
}

export interface ExportSettings {
  mediaProxyPrefix: string;
  batchRows: number;
  batchBytes: number;
  stallTimeoutMs: number;
  minDrainBytesPerS: number;
  maxDurationMs: number;
  dbTimeoutMs: number;
  /** Keep the body when it is at most this many bytes (the export cache); 0: never. */
  captureUpTo: number;
  /** Rewrite workers; null: contentHtml is planned on the event loop, in slices. */
  rewritePool: RewritePool | null;
  offloadBytes: number;
  rewriteTimeoutMs: number;
  plans: PlanUse | null;
  changeTokens: ChangeTokens;
  /** `sql` is a hot standby's pool: its SQLSTATE 40001 and 40P01 are recovery conflicts (D11.5). */
  onStandby: boolean;
}

export interface ExportResult {
  outcome: 'complete' | 'client-gone';
  reason?: GoneReason;
  count: number;
  bytes: number;
  /** The snapshot's export version and change token (decisions.md D12.1); '' if it got no snapshot. */
  version: string;
  token: string;
  body?: Buffer;
}

/** Rows of the first FETCH: few, so the status line goes out fast whatever the knowledge base's size. */
const FIRST_BATCH_ROWS = 16;
const IDLE_MARGIN_MS = 5000;

/** decisions.md D8.5, D8.7; without a drain floor the idle timeout is the snapshot-age limit. */
function exportTimeouts(s: ExportSettings): SnapshotTimeouts {
  return {
    startMs: s.dbTimeoutMs,
    fetchMs: Math.max(60_000, s.dbTimeoutMs),
    lockMs: s.dbTimeoutMs,
    idleInTransactionMs: s.minDrainBytesPerS > 0 ? idleNeededMs(s, 2 * s.batchBytes) : s.maxDurationMs,
  };
}

/** How long the snapshot may idle while `bytes` are rewritten and written at the drain floor, ms (D8.7). */
function idleNeededMs(s: ExportSettings, bytes: number): number {
  const rewriting = s.rewriteTimeoutMs + Math.ceil((bytes * 1000) / SLOWEST_PLANNING_BYTES_PER_S);
  return s.stallTimeoutMs + Math.ceil((bytes * 1000) / s.minDrainBytesPerS) + rewriting + IDLE_MARGIN_MS;
}

const REMOVED_BATCH = 1000;

/**
 * `onHeaders` gets the snapshot's version and change token just before the status line (D9.1, D12.1).
 * Throws ApiError or DependencyError (D8.5) before the first byte; after it, destroys `res` and rethrows.
 * `stop` (the fleet-wide lease's loss, D11.1) fails the export with its reason.
 */
export async function streamExport(
  sql: Sql,
  req: ExportRequest,
  res: ServerResponse,
  settings: ExportSettings,
  onHeaders: (version: string, token: string) => void,
  stop: AbortSignal | null = null,
): Promise<ExportResult> {
  const { stallTimeoutMs, minDrainBytesPerS, maxDurationMs } = settings;
  const writer = new ResponseWriter(res, { stallTimeoutMs, minDrainBytesPerS, maxDurationMs });
  const slices = new EventLoopSlices();
  const pause = () => slices.pause();
  const sink = bodySink(writer, req.encoding);
  const body = new ExportBody(sink, {
    flushEachBatch: req.encoding !== 'identity',
    format: req.format,
    pause,
    ...(settings.captureUpTo > 0 ? { captureUpTo: settings.captureUpTo } : {}),
  });
  const timeouts = exportTimeouts(settings);
  let idleMs = timeouts.idleInTransactionMs;
  let version = '';
  let token = '';
  let started = false;
  const giveUp = {
    signal: stop ? AbortSignal.any([writer.signal, stop]) : writer.signal,
    reason: () => (stop?.aborted ? stop.reason : new ClientGoneError(writer.reason ?? 'gone')),
  };

  try {
    writer.check();
    await inSnapshot(sql, timeouts, async (snap) => {
      const book = await findBook((text, params) => snap.query(text, params, { timeoutMs: timeouts.startMs }), req.userId, req.bookSlug);
      if (!book) throw new ApiError('BOOK_NOT_FOUND');
      version = book.export_version;
      const state = await readChangeState((text, params) => snap.query(text, params, { timeoutMs: timeouts.startMs }), book.id);
      const options = { excludeCategories: req.excludeCategories, includeContentHtml: req.includeContentHtml };
      const since = req.changedSince === null ? null : settings.changeTokens.accept(req.changedSince, state, options);
      token = settings.changeTokens.issue(state, options);
      const rows = Math.max(1, Math.trunc(settings.batchRows));
      const cursor = await DocumentCursor.open(snap, { ...options, withPlans: settings.plans !== null }, book.id, since, {
        budgetBytes: settings.batchBytes,
        maxRows: rows,
        firstRows: Math.min(rows, FIRST_BATCH_ROWS),
        startMs: timeouts.startMs,
        fetchMs: timeouts.fetchMs,
      });
      const stage = {
        prefix: settings.mediaProxyPrefix,
        pool: settings.rewritePool,
        offloadBytes: settings.offloadBytes,
        plans: settings.plans,
        pause,
      };
      const rewrite = (batch: DocumentRow[]): Promise<BatchRewrites> => {
        const out = rewriteRows(batch, stage);
        out.catch(() => {}); // awaited below, or the snapshot has failed already
        return out;
      };
      // No database timeout may cut a client at the drain floor (D8.7); queued behind any FETCH in flight.
      const allowIdle = (bytes: number) => {
        const needed = minDrainBytesPerS > 0 ? idleNeededMs(settings, bytes) : 0;
        if (needed <= idleMs) return;
        idleMs = needed;
        void setIdleTimeout(snap, idleMs, timeouts.fetchMs).catch(() => {});
      };
      const write = async (batch: DocumentRow[], rewrites: BatchRewrites, ahead: number) => {
        allowIdle(rewrites.bytes + ahead);
        await body.writeBatch(batch, rewrites);
      };

      const first = (await cursor.next()) ?? [];
      // Before its rewrite, as for every later batch: a large first document may be rewritten for long (D8.7).
      allowIdle(first.reduce((n, row) => n + rowBytes(row), 0) + 2 * settings.batchBytes);
      const firstRewrites = await rewrite(first);
      writer.check();
      onHeaders(version, token);
      res.writeHead(200, exportHeaders(req.format, req.encoding));
      // Not with the compressor's first bytes: a later failure is an aborted 200 either way (D6.3).
      res.flushHeaders();
      started = true;
      body.open(book);
      await write(first, firstRewrites, 0);
      // The first batch goes out at once: time to first byte does not wait for a full chunk.
      await body.flush();

      // While one batch is written, the next is rewritten and the two after it fetched; not around a large document.
      let pending: { rows: DocumentRow[]; rewrites: Promise<BatchRewrites> } | null = null;
      for (let batch = await cursor.next(); batch !== null; batch = await cursor.next()) {
        writer.check();
        const ahead = batch.reduce((n, row) => n + rowBytes(row), 0);
        allowIdle(ahead + 2 * settings.batchBytes);
        if (batch.length === 1 && ahead > settings.batchBytes) {
          // At most one document larger than a batch is in memory: the batch before it is written
          // first, and the cursor asks for another such document only when it is wanted (D8.4).
          if (pending !== null) await write(pending.rows, await pending.rewrites, 0);
          pending = null;
          await write(batch, await rewrite(batch), 0);
          continue;
        }
        const next = { rows: batch, rewrites: rewrite(batch) };
        if (pending !== null) await write(pending.rows, await pending.rewrites, ahead);
        pending = next;
      }
      if (pending !== null) await write(pending.rows, await pending.rewrites, 0);
      await cursor.close();
      if (since !== null) await writeRemoved(snap, body, [book.id, ...sinceParams(since)], req, timeouts.fetchMs);
    }, giveUp);
    // The last bytes may wait in the socket's buffers long after the snapshot ended: `stop` still fails the export.
    const finishing = body.finish();
    finishing.catch(() => {});
    await Promise.race([finishing, stopped(stop)]);
    res.end();
    const captured = body.captured;
    return { outcome: 'complete', count: body.count, bytes: writer.bytes, version, token, ...(captured ? { body: captured } : {}) };
  } catch (err) {
    sink.destroy();
    if (err instanceof ClientGoneError) {
      res.destroy();
      return { outcome: 'client-gone', reason: err.reason, count: body.count, bytes: writer.bytes, version, token };
    }
    if (started || res.headersSent) {
      res.destroy();
      throw err;
    }
    throw asDatabaseOutage(err, settings.onStandby) ?? err;
  } finally {
    writer.close();
  }
}

/** Rejects with `stop`'s reason once it aborts; never settles without `stop`. */
export function stopped(stop: AbortSignal | null): Promise<never> {
  const settled = new Promise<never>((_, reject) => {
    if (stop?.aborted) reject(stop.reason);
    else stop?.addEventListener('abort', () => reject(stop.reason), { once: true });
  });
  settled.catch(() => {});
  return settled;
}

/** A delta's removed ids (decisions.md D12.2), a batch at a time. */
async function writeRemoved(snap: Snapshot, body: ExportBody, params: [string, string, string], opts: DocumentQueryOptions, timeoutMs: number): Promise<void> {
  await snap.query(`DECLARE kb_export_removed NO SCROLL CURSOR FOR ${removedQuery(opts)}`, params, { timeoutMs });
  for (;;) {
    const rows = await snap.query<[Buffer][]>(`FETCH FORWARD ${REMOVED_BATCH} FROM kb_export_removed`, [], { raw: true, timeoutMs });
    await body.writeRemoved(rows.map((r) => r[0]));
    if (rows.length < REMOVED_BATCH) break;
  }
  await snap.query('CLOSE kb_export_removed', [], { timeoutMs });
}

async function setIdleTimeout(snap: Snapshot, ms: number, timeoutMs: number): Promise<void> {
  await snap.query(`SET LOCAL idle_in_transaction_session_timeout = ${Math.trunc(ms)}`, [], { timeoutMs });
}
