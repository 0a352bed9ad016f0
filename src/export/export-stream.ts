/**
 * The export pipeline, stage by stage:
 *   snapshot.ts        one READ ONLY, REPEATABLE READ transaction with its own timeouts (D6.1, D8.5, D8.7)
 *   document-cursor.ts batches bounded in bytes before they are fetched, the next one read ahead (D8.4)
 *   html-stage.ts      contentHtml's media URLs rewritten, on a worker or inline (D3)
 *   export-body.ts     the JSON body encoded in chunks, meta.count last (D2.5)
 *   response-writer.ts backpressure, slow and vanished clients (D6.4, D8.3)
 *
 * Failure rules (decisions.md D6.2–D6.4, D8.5): headers go out only after the first batch was read
 * and rewritten, so an earlier failure is a proper envelope (503 when the database is unreachable);
 * the closing `],"meta":…}` is written only after the transaction committed, and any failure after
 * the first byte destroys the response without its terminating chunk, so a truncated body can
 * never look complete.
 */
import type { ServerResponse } from 'node:http';
import type { Sql } from '../db/connect.js';
import { asDatabaseOutage } from '../db/dependency.js';
import { ApiError } from '../errors.js';
import { DocumentCursor } from './snapshot/document-cursor.js';
import { ExportBody } from './encode/export-body.js';
import { OFFLOAD_BYTES, rewriteBatchHtml, type BatchHtml, type PlanUse } from './rewrite/html-stage.js';
import { findBook, type BookRow, type DocumentQueryOptions, type DocumentRow } from './snapshot/query.js';
import { ClientGoneError, ResponseWriter, type GoneReason } from './respond/response-writer.js';
import type { RewritePool } from './rewrite/rewrite-pool.js';
import { inSnapshot, type SnapshotTimeouts } from './snapshot/snapshot.js';
import { exportHeaders, type BodyFormat } from './encode/body-format.js';
import { bodySink, type ContentEncoding } from './respond/compression.js';

interface ExportRequest extends DocumentQueryOptions {
  userId: string;
  bookSlug: string;
  /** JSON or NDJSON (decisions.md D9.4); JSON when unset. */
  format?: BodyFormat;
  /** The Content-Encoding (decisions.md D9.3); identity when unset. */
  encoding?: ContentEncoding;
}

interface ExportSettings {
  mediaProxyPrefix: string;
  /** Most rows per FETCH. */
  batchSize: number;
  /** Bytes of row data one batch may hold (decisions.md D8.4); by default BATCH_BYTES or POOL_BATCH_BYTES. */
  batchBytes?: number;
  /** A client that accepts nothing for this long is dropped (decisions.md D6.4), ms. */
  stallTimeoutMs: number;
  /** Bytes per second a client must accept (decisions.md D8.3); 0: no floor. */
  minDrainBytesPerS?: number;
  /** Longest the export's snapshot may stay open (decisions.md D8.3), ms; 0: no limit. */
  maxDurationMs?: number;
  /** Bound on each wait for the database before the first byte, ms (DB_TIMEOUT_MS, decisions.md D8.5). */
  dbTimeoutMs?: number;
  /** Bytes per written chunk. */
  chunkSize?: number;
  /** Keep a copy of the body when it is at most this many bytes (for the export cache). */
  captureUpTo?: number;
  /** Worker threads for contentHtml; without them it is rewritten on the event loop. */
  rewritePool?: RewritePool;
  /** Bytes of flagged contentHtml a batch must hold before it goes to the rewrite pool. */
  offloadBytes?: number;
  /** Stored rewrite plans used and written (REWRITE_PLANS); without, every flagged contentHtml is tokenized. */
  plans?: PlanUse;
  /**
   * Called just before the status line is written, with the book's export version in the snapshot
   * (the caller takes over the response and may set headers, e.g. the ETag of decisions.md D9.1).
   */
  onHeaders?: (version: string) => void;
}

interface ExportResult {
  outcome: 'complete' | 'client-gone';
  /** Why the client is gone, when it is. */
  reason?: GoneReason;
  count: number;
  bytes: number;
  /** The book's export version in the snapshot; '' when the export did not get that far. */
  version: string;
  /** The whole body, when complete and within `captureUpTo`. */
  body?: Buffer;
}

/** Rows of the first FETCH: few, so the status line goes out fast whatever the knowledge base's size. */
const FIRST_BATCH_ROWS = 16;
/** Default bytes of row data per batch. */
const BATCH_BYTES = 2 * 1024 * 1024;
/**
 * The default of an export with HTML when rewrite workers run: three batches are then in flight
 * (encoded, rewritten, fetched) instead of two, and the worker's heap grows with its batch. 256 KB
 * instead of 2 MB keeps the peak RSS ~20 MB lower for ~10 % of the speed (bench/optimisations.md).
 */
const POOL_BATCH_BYTES = 256 * 1024;

/**
 * The snapshot's timeouts from the configuration (decisions.md D8.5, D8.7): `dbTimeoutMs` bounds
 * each wait before the first byte and any lock wait; a FETCH may take 60 s; the idle-in-transaction
 * timeout outlasts the stall rules (a batch of `batchBytes` written at the drain floor, plus the
 * stall timeout), and is the snapshot-age limit itself when there is no floor.
 */
function exportTimeouts(o: {
  dbTimeoutMs: number;
  stallTimeoutMs: number;
  minDrainBytesPerS: number;
  maxDurationMs: number;
  batchBytes: number;
}): SnapshotTimeouts {
  const idle =
    o.minDrainBytesPerS > 0
      ? o.stallTimeoutMs + Math.ceil((2 * o.batchBytes * 1000) / o.minDrainBytesPerS) + 60_000
      : o.maxDurationMs;
  return { startMs: o.dbTimeoutMs, fetchMs: Math.max(60_000, o.dbTimeoutMs), lockMs: o.dbTimeoutMs, idleInTransactionMs: idle };
}

/** Bytes of a fetched row. */
function rowBytes(row: DocumentRow): number {
  let n = 0;
  for (const col of row) n += col?.length ?? 0;
  return n;
}

/** Default database timeout of the export pipeline when the caller passes none, ms. */
const DB_TIMEOUT_MS = 5000;

/**
 * Streams the export of `req` to `res`.
 * Throws ApiError('BOOK_NOT_FOUND'), a DependencyError (database unreachable, decisions.md D8.5)
 * or any other error while nothing was sent (the caller answers with an envelope); after the first
 * byte, errors destroy `res` and are rethrown for logging.
 */
export async function streamExport(sql: Sql, req: ExportRequest, res: ServerResponse, settings: ExportSettings): Promise<ExportResult> {
  const minDrainBytesPerS = settings.minDrainBytesPerS ?? 0;
  const maxDurationMs = settings.maxDurationMs ?? 0;
  const writer = new ResponseWriter(res, { stallTimeoutMs: settings.stallTimeoutMs, minDrainBytesPerS, maxDurationMs });
  const encoding = req.encoding ?? 'identity';
  const sink = bodySink(writer, encoding);
  const body = new ExportBody(sink, {
    mediaProxyPrefix: settings.mediaProxyPrefix,
    flushEachBatch: encoding !== 'identity',
    format: req.format ?? 'json',
    ...(settings.chunkSize !== undefined ? { chunkSize: settings.chunkSize } : {}),
    ...(settings.captureUpTo !== undefined ? { captureUpTo: settings.captureUpTo } : {}),
  });
  const pool = settings.rewritePool;
  const batchBytes = settings.batchBytes ?? (pool && req.includeContentHtml ? POOL_BATCH_BYTES : BATCH_BYTES);
  const timeouts = exportTimeouts({
    dbTimeoutMs: settings.dbTimeoutMs ?? DB_TIMEOUT_MS,
    stallTimeoutMs: settings.stallTimeoutMs,
    minDrainBytesPerS,
    maxDurationMs,
    batchBytes,
  });
  const stage = { prefix: settings.mediaProxyPrefix, pool, offloadBytes: settings.offloadBytes ?? OFFLOAD_BYTES, plans: settings.plans };
  const rewrite = (rows: DocumentRow[]): BatchHtml => rewriteBatchHtml(rows, stage);
  let version = '';
  let started = false;

  try {
    writer.check();
    await inSnapshot(sql, timeouts, async (snap) => {
      const book = await findBook(
        (text, params) => snap.query<BookRow[]>(text, params, { timeoutMs: timeouts.startMs }),
        req.userId,
        req.bookSlug,
      );
      if (!book) throw new ApiError('BOOK_NOT_FOUND');
      version = book.export_version;
      const cursor = await DocumentCursor.open(snap, req, book.id, {
        budgetBytes: batchBytes,
        maxRows: Math.max(1, Math.trunc(settings.batchSize)),
        firstRows: Math.min(Math.max(1, Math.trunc(settings.batchSize)), FIRST_BATCH_ROWS),
        startMs: timeouts.startMs,
        fetchMs: timeouts.fetchMs,
      });

      // decisions.md D6.2: the status line goes out only once the first batch was read and
      // rewritten, so a failure up to here is still answered with an envelope.
      const first = (await cursor.next()) ?? [];
      const firstHtml = await rewrite(first);
      writer.check();
      settings.onHeaders?.(version);
      res.writeHead(200, exportHeaders(req.format ?? 'json', encoding));
      // The status line goes out now, not with the first compressed bytes a compressor may still
      // hold: a failure from here on is an aborted 200, the same with or without compression (D6.3).
      res.flushHeaders();
      started = true;
      body.open(book);
      await body.writeBatch(first, firstHtml);
      // The first batch goes out at once: time to first byte does not wait for a full chunk.
      await body.flush();

      // A batch whose contentHtml is with a rewrite worker waits here while the previous one is
      // encoded and written: the event loop and a worker each have a batch to work on.
      let pending: { rows: DocumentRow[]; html: BatchHtml } | null = null;
      for (let rows = await cursor.next(); rows !== null; rows = await cursor.next()) {
        writer.check();
        if (pending !== null && rows.length === 1 && rowBytes(rows[0]!) > batchBytes) {
          // A document larger than a batch is rewritten only once the one before it is written,
          // so at most one such document is in memory (decisions.md D8.4).
          await body.writeBatch(pending.rows, await pending.html);
          pending = null;
        }
        const batch = { rows, html: rewrite(rows) };
        if (pending !== null) await body.writeBatch(pending.rows, await pending.html);
        pending = batch;
      }
      if (pending !== null) await body.writeBatch(pending.rows, await pending.html);
      await cursor.close();
    }, { signal: writer.signal, reason: () => new ClientGoneError(writer.reason ?? 'gone') });
    // Committed cleanly: only now may the body be completed (decisions.md D6.3).
    await body.finish();
    res.end();
    const captured = body.captured;
    return { outcome: 'complete', count: body.count, bytes: writer.bytes, version, ...(captured ? { body: captured } : {}) };
  } catch (err) {
    sink.destroy();
    if (err instanceof ClientGoneError) {
      res.destroy();
      return { outcome: 'client-gone', reason: err.reason, count: body.count, bytes: writer.bytes, version };
    }
    if (started || res.headersSent) {
      // No terminating chunk: the client sees an aborted body, never a complete-looking one.
      res.destroy();
      throw err;
    }
    throw asDatabaseOutage(err) ?? err;
  } finally {
    writer.close();
  }
}
