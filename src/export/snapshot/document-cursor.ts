/**
 * Batches bounded in bytes before they are fetched (D8.4): a size cursor (no body read) runs
 * beside the export cursor, listing the rows over SIZE_LISTED_OVER bytes and every
 * SIZE_MARK_EVERY-th (query.ts sizeMarkerQuery); the next two batches are asked for as soon as
 * the current one arrives.
 */
import { type DocumentRow } from './rows.js';
import { ROW_OVERHEAD_BYTES, rowsWithinBudget } from './batch-budget.js';
import type { ResumePosition } from '../request/export-request.js';
import { changedDocumentQuery, changedDocumentSizeQuery, sinceParams, type ChangeSince } from './changes-query.js';
import {
  AFTER_POSITION,
  documentQuery,
  documentSizeQuery,
  SIZE_LISTED_OVER,
  SIZE_MARK_EVERY,
  sizeMarkerQuery,
  type DocumentQueryOptions,
} from './query.js';
import type { Snapshot } from './snapshot.js';

const ROWS = 'kb_export_cursor';
const SIZES = 'kb_export_sizes';

interface CursorLimits {
  budgetBytes: number;
  maxRows: number;
  firstRows: number;
  /** Timeouts, ms: startMs for each DECLARE and the first FETCH, fetchMs for later ones. */
  startMs: number;
  fetchMs: number;
}

interface Request {
  asked: number;
  rows: Promise<DocumentRow[]>;
}

/**
 * Batches asked for before they are wanted. With one, PostgreSQL waited while Node still read the
 * rows of the batch it had just sent; with two it works on the next one meanwhile.
 */
const AHEAD = 2;
/** A batch not asked for: the next row is larger than the budget, and comes only when wanted (D8.4). */
const DEFERRED = null;
const FINISHED: Request = { asked: 0, rows: Promise.resolve([]) };

/** Which documents of the book the cursor reads: all, those changed since a token (D12.2), or those after a position (D13.1). */
export type DocumentSelection = { all: true } | { since: ChangeSince } | { after: ResumePosition };

/** The size cursor's and the rows' SQL for `selection`, and their parameters. */
function selectionQueries(
  opts: DocumentQueryOptions,
  bookId: string,
  selection: DocumentSelection,
): [string, string, string[]] {
  if ('since' in selection)
    return [
      sizeMarkerQuery(changedDocumentSizeQuery(opts)),
      changedDocumentQuery(opts),
      [bookId, ...sinceParams(selection.since)],
    ];
  if ('after' in selection) {
    const { orderKey, id } = selection.after;
    return [
      sizeMarkerQuery(documentSizeQuery(opts, AFTER_POSITION)),
      documentQuery(opts, AFTER_POSITION),
      [bookId, orderKey, id],
    ];
  }
  return [sizeMarkerQuery(documentSizeQuery(opts)), documentQuery(opts), [bookId]];
}

export class DocumentCursor {
  /** Sizes read ahead, SIZE_LISTED_OVER for a row not listed; `sizes[head…]` belong to rows not yet asked for. */
  #sizes: number[] = [];
  #head = 0;
  /** The 1-based position of the first row whose size is not in `sizes` yet. */
  #nextRow = 1;
  #sizesDone = false;
  #sizesPending: Promise<void> | null = null;
  /** The next batches in order, each asked for once the one before it was; empty once every row was returned. */
  #ahead: Promise<Request | typeof DEFERRED>[];
  #first = true;
  /** Sizes per read: the first batch's only, so the first byte waits for no more than it needs. */
  #sizeChunk: number;

  private constructor(
    private readonly snap: Snapshot,
    private readonly limits: CursorLimits,
  ) {
    this.#sizeChunk = limits.firstRows;
    this.#ahead = [this.#readAhead(this.#request(limits.firstRows, limits.startMs))];
  }

  /** Declares both cursors over the documents `selection` names and asks for the first batch. */
  static async open(
    snap: Snapshot,
    opts: DocumentQueryOptions,
    bookId: string,
    selection: DocumentSelection,
    limits: CursorLimits,
  ): Promise<DocumentCursor> {
    const [sizes, rows, params] = selectionQueries(opts, bookId, selection);
    const declare = (name: string, query: string) =>
      snap.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${query}`, params, { timeoutMs: limits.startMs });
    await Promise.all([declare(SIZES, sizes), declare(ROWS, rows)]);
    return new DocumentCursor(snap, limits);
  }

  /** `[]` for the first batch of an empty book, null once every row was returned. */
  async next(): Promise<DocumentRow[] | null> {
    const ahead = this.#ahead.shift();
    if (ahead === undefined) return null;
    let request = await ahead;
    if (request === DEFERRED) {
      // What is queued behind it waited for it, and was not asked for either.
      this.#ahead = [];
      request = await this.#ask();
    }
    const { asked, rows: pending } = request;
    const rows = await pending;
    const first = this.#first;
    this.#first = false;
    // FETCH returns fewer rows than asked only at the cursor's end.
    if (asked !== 0 && rows.length === asked) this.#fill();
    else this.#ahead = [];
    return rows.length === 0 && !first ? null : rows;
  }

  /** Asks for batches up to AHEAD, none past a row larger than the budget, so at most one is in memory (D8.4). */
  #fill(): void {
    while (this.#ahead.length < AHEAD) {
      const before = this.#ahead.at(-1);
      const after = (r: Request | typeof DEFERRED) =>
        r === DEFERRED ? DEFERRED : r.asked === 0 ? FINISHED : this.#askUnlessOversized();
      this.#ahead.push(this.#readAhead(before === undefined ? this.#askUnlessOversized() : before.then(after)));
    }
  }

  async #askUnlessOversized(): Promise<Request | typeof DEFERRED> {
    await this.#ensureSizes(1);
    return this.#nextIsOversized() ? DEFERRED : this.#ask();
  }

  #ask(): Promise<Request> {
    return this.#request(this.limits.maxRows, this.limits.fetchMs);
  }

  /** The export may stop before it wants this batch; its rejection must not then end the process. */
  #readAhead<T>(request: Promise<T>): Promise<T> {
    request.catch(() => {});
    return request;
  }

  #nextIsOversized(): boolean {
    const size = this.#sizes[this.#head];
    return size !== undefined && size + ROW_OVERHEAD_BYTES > this.limits.budgetBytes;
  }

  /** The transaction's end would close them too; this frees their memory earlier. */
  async close(): Promise<void> {
    await this.snap.query(`CLOSE ${ROWS}; CLOSE ${SIZES}`, [], { timeoutMs: this.limits.fetchMs });
  }

  async #request(maxRows: number, timeoutMs: number): Promise<Request> {
    await this.#ensureSizes(maxRows);
    const asked = rowsWithinBudget(this.#sizes, this.#head, this.limits.budgetBytes, maxRows);
    this.#head += asked;
    if (asked === 0) return { asked, rows: Promise.resolve([]) };
    const rows = this.snap.query<DocumentRow[]>(`FETCH FORWARD ${asked} FROM ${ROWS}`, [], { raw: true, timeoutMs });
    rows.catch(() => {});
    // Queued behind the batch on the connection, never ahead of it.
    this.#readSizesAhead();
    return { asked, rows };
  }

  async #ensureSizes(count: number): Promise<void> {
    while (this.#sizes.length - this.#head < count && !this.#sizesDone) {
      this.#readSizesAhead(true);
      await this.#sizesPending;
    }
  }

  #unlisted(): void {
    this.#sizes.push(SIZE_LISTED_OVER);
    this.#nextRow++;
  }

  #readSizesAhead(force = false): void {
    if (this.#sizesDone || this.#sizesPending !== null) return;
    if (!force && this.#sizes.length - this.#head >= this.limits.maxRows) return;
    const chunk = this.#sizeChunk;
    this.#sizeChunk = Math.max(1024, 2 * this.limits.maxRows);
    const reading = this.snap.query<[Buffer, Buffer][]>(`FETCH FORWARD ${chunk} FROM ${SIZES}`, [], {
      raw: true,
      timeoutMs: this.limits.fetchMs,
    });
    this.#sizesPending = reading.then(
      (rows) => {
        // Drop what was used, so the buffer never holds more than a chunk's rows and a batch.
        this.#sizes = this.#sizes.slice(this.#head);
        this.#head = 0;
        for (let i = 0; i < rows.length; i++) {
          const row = decimal(rows[i]![0]);
          while (this.#nextRow < row) this.#unlisted();
          this.#sizes.push(decimal(rows[i]![1]));
          this.#nextRow++;
        }
        if (rows.length < chunk) {
          // After the last one listed, fewer rows than up to the next SIZE_MARK_EVERY-th may be
          // left, none of them listed: counted as if all were, the FETCH that asks for them ends short.
          const end = Math.ceil(this.#nextRow / SIZE_MARK_EVERY) * SIZE_MARK_EVERY;
          while (this.#nextRow < end) this.#unlisted();
          this.#sizesDone = true;
        }
        this.#sizesPending = null;
      },
      (err: unknown) => {
        this.#sizesPending = null;
        throw err;
      },
    );
    this.#sizesPending.catch(() => {});
  }
}

/** A non-negative int8 as PostgreSQL's text format writes it, read without a string per row. */
function decimal(text: Buffer): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) n = n * 10 + text[i]! - 0x30;
  return n;
}
