/**
 * The export pipeline: one READ ONLY, REPEATABLE READ transaction holds the book lookup and a cursor
 * over the documents (decisions.md D6.1); each batch is encoded and written with backpressure while
 * at most the next is fetched (and, with rewrite workers, the one after it rewritten), so memory is
 * bounded whatever the knowledge base's size.
 *
 * Failure rules (decisions.md D6.2–D6.4): headers go out only after the first batch was read, so an
 * earlier failure is a proper 500 envelope; the closing `],"meta":…}` is written only after the
 * transaction committed, and any failure after the first byte destroys the response without its
 * terminating chunk, so a truncated body can never look complete.
 */
import type { ServerResponse } from 'node:http';
import type { Sql } from '../db/connect.js';
import { ApiError } from '../errors.js';
import { contentHtmlAsStored, encodeClosing, encodeDocument, encodeOpening, rewriteContentHtmlJson } from './document-encoder.js';
import { JsonChunker } from './json-encoder.js';
import { BOOK_QUERY, DOC, documentQuery, type BookRow, type DocumentQueryOptions, type DocumentRow } from './query.js';
import { ClientGoneError, ResponseWriter } from './response-writer.js';
import type { RewritePool } from './rewrite-pool.js';

export interface ExportRequest extends DocumentQueryOptions {
  userId: string;
  bookSlug: string;
}

export interface ExportSettings {
  mediaProxyPrefix: string;
  /** Most rows per FETCH; batches are otherwise sized by `batchChars` (see nextBatchSize). */
  batchSize: number;
  /** Bytes of row text a batch aims at, so memory stays bounded whatever the documents' size. */
  batchChars?: number;
  /** A client that accepts nothing for this long, ms, is dropped (decisions.md D6.4). */
  stallTimeoutMs: number;
  /** Bytes per second a client must accept, over the last stallTimeoutMs; 0: no floor (decisions.md D8.3). */
  minDrainBytesPerS: number;
  /** Longest the export (and its snapshot) may stay open, ms; 0: no limit (decisions.md D8.3). */
  maxDurationMs: number;
  /** Bytes per written chunk. */
  chunkSize?: number;
  /** Keep a copy of the body when it is at most this many bytes (for the export cache). */
  captureUpTo?: number;
  /** Worker threads for contentHtml; without them it is rewritten on the event loop. */
  rewritePool?: RewritePool;
  /**
   * Bytes of flagged contentHtml a batch must hold before it goes to the rewrite pool; smaller
   * batches are rewritten on the event loop, where they cost less than the round trip.
   */
  offloadBytes?: number;
  /** Called just before the status line is written (the caller takes over the response). */
  onHeaders?: () => void;
}

export interface ExportResult {
  outcome: 'complete' | 'client-gone';
  count: number;
  bytes: number;
  /** The book's export version in the snapshot; '' when the export did not get that far. */
  version: string;
  /** The whole body, when complete and within `captureUpTo`. */
  body?: Buffer;
}

/** Response headers of a successful export (decisions.md D6.5). */
export const EXPORT_HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'cache-control': 'no-store',
} as const;

const CURSOR = 'kb_export_cursor';

/** Rows of the first FETCH: few, so the status line goes out fast whatever the knowledge base's size. */
export const FIRST_BATCH_ROWS = 16;
/** Default bytes of row text per batch. */
export const BATCH_CHARS = 2 * 1024 * 1024;
/**
 * The default of an export with HTML when rewrite workers run: three batches are then in flight
 * (encoded, rewritten, fetched) instead of two, and the worker's heap grows with its batch. 256 KB
 * instead of 2 MB keeps the peak RSS ~20 MB lower for ~10 % of the speed (bench/optimisations.md).
 */
export const POOL_BATCH_CHARS = 256 * 1024;
const COMMA = Buffer.from(',');
/** Default of ExportSettings.offloadBytes. */
export const OFFLOAD_BYTES = 64 * 1024;

/** A fetched batch, with its contentHtml worked out ahead when rewrite workers run. */
interface Batch {
  rows: DocumentRow[];
  /** Per row: contentHtml's JSON text as exported (or being rewritten by the pool); null: the encoder works it out. */
  html: Buffer[] | Promise<Buffer[]> | null;
}

/**
 * With a rewrite pool, works out every row's contentHtml once, ahead of the encoder: as stored
 * where the pre-check lets it through, and the flagged ones rewritten by the pool when they hold at
 * least `offloadBytes`, on the event loop otherwise (where they cost less than the round trip).
 * Without a pool, null: the encoder does it all.
 */
function prepareHtml(rows: DocumentRow[], pool: RewritePool | undefined, prefix: string, offloadBytes: number): Batch['html'] {
  if (pool === undefined) return null;
  const perRow = new Array<Buffer>(rows.length);
  const at: number[] = [];
  const texts: Buffer[] = [];
  let bytes = 0;
  rows.forEach((row, i) => {
    const j = row[DOC.contentHtml];
    const stored = contentHtmlAsStored(j);
    if (stored !== undefined) perRow[i] = stored;
    else {
      at.push(i);
      texts.push(j!);
      bytes += j!.length;
    }
  });
  if (at.length === 0 || bytes < offloadBytes) {
    at.forEach((row, k) => (perRow[row] = rewriteContentHtmlJson(texts[k]!, prefix)));
    return perRow;
  }
  const html = pool.rewrite(texts, prefix).then((out) => {
    at.forEach((row, k) => (perRow[row] = out[k]!));
    return perRow;
  });
  // Awaited when the batch is encoded; until then a rejection must not count as unhandled.
  html.catch(() => {});
  return html;
}

/** Bytes a row holds, roughly: its two bodies plus a constant for the other columns. */
function rowChars(row: DocumentRow): number {
  return (row[DOC.contentHtml]?.length ?? 0) + (row[DOC.contentStr]?.length ?? 0) + 512;
}

/**
 * Rows for the next FETCH: as many rows as `batchChars` bytes hold at the last batch's average row size,
 * between 1 and `maxRows`. Keeps memory per batch flat for knowledge bases of large documents,
 * and round trips few for small ones.
 */
export function nextBatchSize(rows: readonly DocumentRow[], batchChars: number, maxRows: number): number {
  let chars = 0;
  for (const row of rows) chars += rowChars(row);
  const average = rows.length === 0 ? 512 : chars / rows.length;
  return Math.max(1, Math.min(maxRows, Math.floor(batchChars / average)));
}

/** Whether `err` means the database connection is gone (FATAL error, closed or reset socket). */
function isConnectionLost(err: unknown): boolean {
  const e = err as { code?: unknown; severity?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  if (e.severity === 'FATAL' || e.severity === 'PANIC') return true;
  return typeof e.code === 'string' && /^(08|57P0[1-3]$|CONNECTION_|ECONN|EPIPE$|ETIMEDOUT$)/.test(e.code);
}

/**
 * Streams the export of `req` to `res`.
 * Throws ApiError('BOOK_NOT_FOUND') or any other error while nothing was sent (the caller answers
 * with an envelope); after the first byte, errors destroy `res` and are rethrown for logging.
 */
export async function streamExport(
  sql: Sql,
  req: ExportRequest,
  res: ServerResponse,
  settings: ExportSettings,
): Promise<ExportResult> {
  const writer = new ResponseWriter(res, {
    stallTimeoutMs: settings.stallTimeoutMs,
    minDrainBytesPerS: settings.minDrainBytesPerS,
    maxDurationMs: settings.maxDurationMs,
  });
  const chunker = new JsonChunker(settings.chunkSize);
  const maxRows = Math.max(1, Math.trunc(settings.batchSize));
  const batchChars = settings.batchChars ?? (settings.rewritePool && req.includeContentHtml ? POOL_BATCH_CHARS : BATCH_CHARS);
  const offloadBytes = settings.offloadBytes ?? OFFLOAD_BYTES;
  let count = 0;
  let started = false;

  let captured: Buffer[] | null = settings.captureUpTo !== undefined ? [] : null;
  let capturedBytes = 0;
  let version = '';
  const flush = async () => {
    const chunk = chunker.take();
    if (captured !== null) {
      capturedBytes += chunk.length;
      if (capturedBytes <= settings.captureUpTo!) captured.push(chunk);
      else captured = null;
    }
    await writer.write(chunk);
  };

  // postgres.js 3.4.x writes small messages from a setImmediate; once the transaction's connection has
  // closed, any query sent on it (the callback's own, or the ROLLBACK/COMMIT that begin() sends when
  // the callback settles) dereferences a null socket: an uncaught TypeError that ends the process
  // (porsager/postgres#1208, #1154). So once the connection is lost, the callback sends nothing more and
  // never settles; the export fails through `abandoned` (or begin()'s own CONNECTION_CLOSED rejection).
  let lost: unknown = null;
  let abandon!: (err: unknown) => void;
  const abandoned = new Promise<never>((_, reject) => (abandon = reject));
  const live = () => {
    if (lost !== null) throw lost;
  };
  const encodeBatch = async (batch: Batch) => {
    const html = batch.html === null ? null : await batch.html;
    writer.check();
    for (let i = 0; i < batch.rows.length; i++) {
      if (count > 0) chunker.push(COMMA);
      encodeDocument(batch.rows[i]!, settings.mediaProxyPrefix, chunker, html?.[i]);
      count++;
      if (chunker.full) await flush();
    }
  };

  try {
    // A client that left during the key and book lookups never reaches the database.
    writer.check();
    const transaction = sql.begin('READ ONLY ISOLATION LEVEL REPEATABLE READ', async (tx) => {
      try {
        live();
        // A NUL byte can never be in a stored slug, and PostgreSQL rejects it in text parameters.
        const books = req.bookSlug.includes('\0') ? [] : await tx.unsafe<BookRow[]>(BOOK_QUERY, [req.userId, req.bookSlug]);
        const book = books[0];
        if (!book) throw new ApiError('BOOK_NOT_FOUND');
        version = book.export_version;
        live();
        await tx.unsafe(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${documentQuery(req)}`, [book.id]);
        // Each FETCH is a query of its own: a dead connection rejects it, it cannot end the loop quietly.
        const fetchRows = (n: number) => {
          live();
          const q = tx.unsafe(`FETCH FORWARD ${n} FROM ${CURSOR}`).raw().execute();
          // Awaited below; until then a rejection must not count as unhandled.
          q.catch(() => {});
          return { n, rows: q as unknown as Promise<DocumentRow[]> };
        };
        let next: { n: number; rows: Promise<DocumentRow[]> } | null = fetchRows(Math.min(maxRows, FIRST_BATCH_ROWS));
        // A batch whose contentHtml is with the rewrite pool waits here while the previous one is
        // encoded and written: the event loop and a worker each have a batch to work on.
        let pending: Batch | null = null;
        while (next !== null) {
          const rows: DocumentRow[] = await next.rows;
          writer.check();
          // FETCH returns fewer rows than asked only at the cursor's end. Otherwise the next batch is
          // asked for now, so PostgreSQL reads and sends it while this one is encoded and written.
          next = rows.length < next.n ? null : fetchRows(nextBatchSize(rows, batchChars, maxRows));
          const batch: Batch = { rows, html: prepareHtml(rows, settings.rewritePool, settings.mediaProxyPrefix, offloadBytes) };
          if (!started) {
            // decisions.md D6.2: the status line goes out only once the first batch was read and
            // rewritten, so a failure up to here is still answered with an envelope.
            if (batch.html !== null) await batch.html;
            writer.check();
            settings.onHeaders?.();
            res.writeHead(200, EXPORT_HEADERS);
            started = true;
            chunker.push(encodeOpening(book));
            // The first batch goes out at once: time to first byte does not wait for a full chunk.
            await encodeBatch(batch);
            await flush();
            continue;
          }
          if (pending !== null) await encodeBatch(pending);
          pending = batch;
        }
        if (pending !== null) await encodeBatch(pending);
        live();
        await tx.unsafe(`CLOSE ${CURSOR}`);
      } catch (err) {
        if (lost === null && !isConnectionLost(err)) throw err; // begin() rolls back on a live connection
        lost ??= err;
        abandon(err);
        return new Promise<never>(() => {}); // sends no ROLLBACK on the dead connection (see above)
      }
    });
    // begin() rejects when its connection closes, even while the callback still waits (e.g. for 'drain').
    transaction.catch((err: unknown) => {
      lost ??= err;
    });
    await Promise.race([transaction, abandoned]);
    // Committed cleanly: only now may the body be completed (decisions.md D6.3).
    chunker.push(encodeClosing(count));
    await flush();
    res.end();
    const body = captured === null ? undefined : Buffer.concat(captured, capturedBytes);
    return { outcome: 'complete', count, bytes: writer.bytes, version, ...(body ? { body } : {}) };
  } catch (err) {
    if (err instanceof ClientGoneError) {
      res.destroy();
      return { outcome: 'client-gone', count, bytes: writer.bytes, version };
    }
    if (started || res.headersSent) {
      // No terminating chunk: the client sees an aborted body, never a complete-looking one.
      res.destroy();
    }
    throw err;
  } finally {
    writer.close();
  }
}
