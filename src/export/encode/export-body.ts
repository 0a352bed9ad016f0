/** One export's body, encoded in chunks and written with backpressure; keeps a copy of a small body for the cache. */
import type { BookRow } from '../request/book.js';
import type { DocumentRow } from '../snapshot/rows.js';
import {
  DOCUMENT_END,
  encodeClosing,
  encodeDocumentHead,
  encodeOpening,
  storedContentHtml,
} from './document-encoder.js';
import { isDirect, type BatchRewrites } from '../rewrite/rewrites.js';
import { JsonChunker } from './json-encoder.js';
import { FRAMING, type Framing } from './body-format.js';
import type { BodyFormat } from '../request/negotiate.js';
import type { Pause } from '../../event-loop.js';

export interface BodySink {
  /**
   * Resolves when more may be written; rejects with ClientGoneError. Calls `written` once
   * nothing holds `chunk` any more, so its memory may be filled again; never after a failure.
   */
  write(chunk: Buffer, written?: () => void): Promise<void>;
  flush(): Promise<void>;
  /** The end of the body (only after the snapshot committed: D6.3). */
  end(): Promise<void>;
}

interface ExportBodyOptions {
  format?: BodyFormat;
  chunkSize?: number;
  captureUpTo?: number;
  /** Flush the sink after every batch: a compressor holds back what it was given (D9.3). */
  flushEachBatch?: boolean;
  /** Yields to the event loop when a slice has run its time (D8.8). */
  pause: Pause;
}

export class ExportBody {
  readonly #chunker: JsonChunker;
  readonly #format: BodyFormat;
  readonly #framing: Framing;
  #count = 0;
  #removed = 0;
  #removedOpen = false;
  #captured: Buffer[] | null;
  #capturedBytes = 0;

  constructor(
    private readonly sink: BodySink,
    private readonly opts: ExportBodyOptions,
  ) {
    this.#chunker = new JsonChunker(opts.chunkSize);
    this.#format = opts.format ?? 'json';
    this.#framing = FRAMING[this.#format];
    this.#captured = opts.captureUpTo !== undefined ? [] : null;
  }

  get count(): number {
    return this.#count;
  }

  /** The whole body, when it was kept (complete and within captureUpTo). */
  get captured(): Buffer | undefined {
    return this.#captured === null ? undefined : Buffer.concat(this.#captured, this.#capturedBytes);
  }

  open(book: BookRow): void {
    this.#chunker.push(encodeOpening(book, this.#format));
  }

  /** Encodes a batch's documents with their rewrites and writes each full chunk. Throws ClientGoneError. */
  async writeBatch(rows: readonly DocumentRow[], rewrites: BatchRewrites): Promise<void> {
    const out = this.#chunker;
    for (let i = 0; i < rows.length; i++) {
      if (this.#count > 0 && this.#framing.between !== null) out.push(this.#framing.between);
      encodeDocumentHead(rows[i]!, rewrites.coverUrls[i]!, out);
      const html = rewrites.contentHtml[i]!;
      if (html === null || Buffer.isBuffer(html)) out.push(storedContentHtml(html));
      else if (isDirect(html)) html.writeTo(out);
      else {
        let n = 0;
        for (const piece of html) {
          out.push(piece);
          if (++n % 1024 === 0) {
            if (out.full) await this.#writeChunks();
            await this.opts.pause();
          }
        }
      }
      out.push(DOCUMENT_END);
      if (this.#framing.afterDocument !== null) out.push(this.#framing.afterDocument);
      this.#count++;
      if (out.full) await this.#writeChunks();
      const paused = this.opts.pause();
      if (paused !== undefined) await paused;
    }
    if (this.opts.flushEachBatch) await this.flush();
  }

  async flush(): Promise<void> {
    await this.#writeChunks();
    await this.sink.flush();
  }

  async #writeChunks(): Promise<void> {
    const chunker = this.#chunker;
    for (const chunk of chunker.takeChunks()) {
      if (this.#captured !== null) {
        this.#capturedBytes += chunk.length;
        if (this.#capturedBytes <= this.opts.captureUpTo!) {
          chunker.keep(chunk);
          this.#captured.push(chunk);
          await this.sink.write(chunk);
          continue;
        }
        this.#captured = null;
      }
      await this.sink.write(chunk, () => chunker.release(chunk));
    }
  }

  /**
   * Writes a delta's removed ids (D12.2), each its JSON string's bytes, after every
   * document; call it for each batch of them, with none at all for a delta without removals.
   */
  async writeRemoved(ids: readonly Buffer[]): Promise<void> {
    const f = this.#framing;
    const out = this.#chunker;
    if (!this.#removedOpen) {
      this.#removedOpen = true;
      out.push(f.removedOpen);
    }
    for (const id of ids) {
      if (this.#removed > 0 && f.removedBetween !== null) out.push(f.removedBetween);
      if (f.removedBefore !== null) out.push(f.removedBefore);
      out.push(id);
      if (f.removedAfter !== null) out.push(f.removedAfter);
      this.#removed++;
      if (out.full) await this.#writeChunks();
      const paused = this.opts.pause();
      if (paused !== undefined) await paused;
    }
  }

  /** Writes the closing with `meta.count`: only after the snapshot committed (D6.3). */
  async finish(): Promise<void> {
    this.#chunker.push(encodeClosing(this.#count, this.#format));
    await this.#writeChunks();
    await this.sink.end();
  }
}
