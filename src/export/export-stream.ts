/**
 * The export pipeline: one READ ONLY, REPEATABLE READ transaction holds the book lookup and a cursor
 * over the documents (decisions.md D6.1); each batch is encoded and written with backpressure before
 * the next is fetched, so memory is bounded whatever the knowledge base's size.
 *
 * Failure rules (decisions.md D6.2–D6.4): headers go out only after the first batch was read, so an
 * earlier failure is a proper 500 envelope; the closing `],"meta":…}` is written only after the
 * transaction committed, and any failure after the first byte destroys the response without its
 * terminating chunk, so a truncated body can never look complete.
 */
import type { ServerResponse } from 'node:http';
import type { Sql } from '../db/connect.js';
import { ApiError } from '../errors.js';
import { encodeClosing, encodeDocument, encodeOpening } from './document-encoder.js';
import { JsonChunker } from './json-encoder.js';
import { BOOK_QUERY, documentQuery, type BookRow, type DocumentQueryOptions, type DocumentRow } from './query.js';
import { ClientGoneError, ResponseWriter } from './response-writer.js';

export interface ExportRequest extends DocumentQueryOptions {
  userId: string;
  bookSlug: string;
}

export interface ExportSettings {
  mediaProxyPrefix: string;
  /** Rows per FETCH. */
  batchSize: number;
  stallTimeoutMs: number;
  /** Characters per written chunk. */
  chunkSize?: number;
  /** Called just before the status line is written (the caller takes over the response). */
  onHeaders?: () => void;
}

export interface ExportResult {
  outcome: 'complete' | 'client-gone';
  count: number;
  bytes: number;
}

/** Response headers of a successful export (decisions.md D6.5). */
export const EXPORT_HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'cache-control': 'no-store',
} as const;

const CURSOR = 'kb_export_cursor';

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
  const writer = new ResponseWriter(res, settings.stallTimeoutMs);
  const chunker = new JsonChunker(settings.chunkSize);
  const fetchSql = `FETCH FORWARD ${Math.max(1, Math.trunc(settings.batchSize))} FROM ${CURSOR}`;
  let count = 0;
  let started = false;

  const flush = async () => {
    await writer.write(chunker.take());
  };

  try {
    await sql.begin('READ ONLY ISOLATION LEVEL REPEATABLE READ', async (tx) => {
      // A NUL byte can never be in a stored slug, and PostgreSQL rejects it in text parameters.
      const books = req.bookSlug.includes('\0') ? [] : await tx.unsafe<BookRow[]>(BOOK_QUERY, [req.userId, req.bookSlug]);
      const book = books[0];
      if (!book) throw new ApiError('BOOK_NOT_FOUND');
      await tx.unsafe(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${documentQuery(req)}`, [book.id]);
      for (;;) {
        // Each FETCH is a query of its own: a dead connection rejects it, it cannot end the loop quietly.
        const rows = (await tx.unsafe(fetchSql).values()) as unknown as DocumentRow[];
        writer.check();
        if (!started) {
          // decisions.md D6.2: the status line goes out only once the first batch was read.
          settings.onHeaders?.();
          res.writeHead(200, EXPORT_HEADERS);
          started = true;
          chunker.push(encodeOpening(book));
        }
        for (const row of rows) {
          chunker.push(count === 0 ? '' : ',');
          chunker.push(encodeDocument(row, settings.mediaProxyPrefix));
          count++;
          if (chunker.full) await flush();
        }
        if (rows.length === 0) break;
      }
      await tx.unsafe(`CLOSE ${CURSOR}`);
    });
    // Committed cleanly: only now may the body be completed (decisions.md D6.3).
    chunker.push(encodeClosing(count));
    await flush();
    res.end();
    return { outcome: 'complete', count, bytes: writer.bytes };
  } catch (err) {
    if (err instanceof ClientGoneError) {
      res.destroy();
      return { outcome: 'client-gone', count, bytes: writer.bytes };
    }
    if (started || res.headersSent) {
      // No terminating chunk: the client sees an aborted body, never a complete-looking one.
      res.destroy();
    }
    throw err;
  }
}
