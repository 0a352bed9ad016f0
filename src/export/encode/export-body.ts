/**
 * The body of one export as it is encoded and written: `{"success":true,"book":…,"documents":[`,
 * each document, and `],"meta":{"count":N}}` last (decisions.md D2.5), or the same as NDJSON lines
 * (D9.4, body-format.ts), in chunks through the ResponseWriter (backpressure), counting documents
 * and keeping a copy of a small body for the export cache.
 */
import { encodeClosing, encodeDocument, encodeOpening, type ContentHtmlJson } from './document-encoder.js';
import { JsonChunker } from './json-encoder.js';
import { FRAMING, type BodyFormat, type Framing } from './body-format.js';
import type { BookRow, DocumentRow } from '../snapshot/query.js';
import type { BodySink } from '../respond/compression.js';

interface ExportBodyOptions {
  mediaProxyPrefix: string;
  /** JSON (the default) or NDJSON (decisions.md D9.4). */
  format?: BodyFormat;
  /** Bytes per written chunk. */
  chunkSize?: number;
  /** Keep a copy of the body while it is at most this many bytes. */
  captureUpTo?: number;
  /** Flush the sink after every batch: a compressor holds back what it was given (decisions.md D9.3). */
  flushEachBatch?: boolean;
}

export class ExportBody {
  readonly #chunker: JsonChunker;
  readonly #format: BodyFormat;
  readonly #framing: Framing;
  #count = 0;
  #captured: Buffer[] | null;
  #capturedBytes = 0;

  /** Writes into `sink` (the response, compressed or not: respond/compression.ts). */
  constructor(
    private readonly sink: BodySink,
    private readonly opts: ExportBodyOptions,
  ) {
    this.#chunker = new JsonChunker(opts.chunkSize);
    this.#format = opts.format ?? 'json';
    this.#framing = FRAMING[this.#format];
    this.#captured = opts.captureUpTo !== undefined ? [] : null;
  }

  /** Documents encoded so far. */
  get count(): number {
    return this.#count;
  }

  /** The whole body, when it was kept (complete and within captureUpTo). */
  get captured(): Buffer | undefined {
    return this.#captured === null ? undefined : Buffer.concat(this.#captured, this.#capturedBytes);
  }

  /** Starts the body with the book. */
  open(book: BookRow): void {
    this.#chunker.push(encodeOpening(book, this.#format));
  }

  /**
   * Encodes the documents of a batch, `html[i]` being row i's contentHtml JSON text as exported
   * (html-stage.ts), and writes each full chunk. Throws ClientGoneError.
   */
  async writeBatch(rows: readonly DocumentRow[], html: readonly ContentHtmlJson[]): Promise<void> {
    for (let i = 0; i < rows.length; i++) {
      if (this.#count > 0 && this.#framing.between !== null) this.#chunker.push(this.#framing.between);
      encodeDocument(rows[i]!, this.opts.mediaProxyPrefix, this.#chunker, html[i]!);
      if (this.#framing.afterDocument !== null) this.#chunker.push(this.#framing.afterDocument);
      this.#count++;
      if (this.#chunker.full) await this.#writeChunks();
    }
    if (this.opts.flushEachBatch) await this.flush();
  }

  /** Writes what is encoded so far, full chunk or not, and flushes the sink. Throws ClientGoneError. */
  async flush(): Promise<void> {
    await this.#writeChunks();
    await this.sink.flush();
  }

  async #writeChunks(): Promise<void> {
    for (const chunk of this.#chunker.takeChunks()) {
      if (this.#captured !== null) {
        this.#capturedBytes += chunk.length;
        if (this.#capturedBytes <= this.opts.captureUpTo!) this.#captured.push(chunk);
        else this.#captured = null;
      }
      await this.sink.write(chunk);
    }
  }

  /**
   * Writes `],"meta":{"count":N}}` and the rest: only once the snapshot was read in full and
   * committed (decisions.md D6.3).
   */
  async finish(): Promise<void> {
    this.#chunker.push(encodeClosing(this.#count, this.#format));
    await this.#writeChunks();
    await this.sink.end();
  }
}
