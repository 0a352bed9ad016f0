/**
 * The documents of one export, in batches bounded in bytes before they are fetched
 * (decisions.md D8.4), read from two cursors in the same snapshot over the same rows in the same
 * order: a light one that returns each row's size (query.ts documentSizeQuery: no document body
 * is read) and the export cursor itself (documentQuery). The sizes say how many rows of the export
 * cursor the next FETCH may ask for.
 *
 * The next batch is always asked for as soon as the current one arrives, so PostgreSQL reads and
 * sends it while the current one is rewritten, encoded and written; sizes are read ahead in
 * chunks so that asking never waits for them.
 */
import { ROW_OVERHEAD_BYTES, rowsWithinBudget } from './batch-budget.js';
import { documentQuery, documentSizeQuery, type DocumentQueryOptions, type DocumentRow } from './query.js';
import type { Snapshot } from './snapshot.js';

const ROWS = 'kb_export_cursor';
const SIZES = 'kb_export_sizes';

interface CursorLimits {
  /** Bytes of row data one batch may hold (a larger single row comes alone). */
  budgetBytes: number;
  /** Most rows one batch may hold. */
  maxRows: number;
  /** Most rows of the first batch: few, so the first byte goes out fast. */
  firstRows: number;
  /** Timeout of each DECLARE and of the first FETCH, ms. */
  startMs: number;
  /** Timeout of each later FETCH, ms. */
  fetchMs: number;
}

interface Request {
  asked: number;
  rows: Promise<DocumentRow[]>;
}

/** A byte-bounded, read-ahead cursor over the documents of one book in one snapshot. */
export class DocumentCursor {
  /** Sizes read ahead; `sizes[head…]` belong to rows not yet asked for. */
  #sizes: number[] = [];
  #head = 0;
  #sizesDone = false;
  #sizesPending: Promise<void> | null = null;
  /** The next batch: asked for already, to be asked for when wanted (a function), or none. */
  #ahead: Promise<Request> | (() => Promise<Request>) | null;
  #first = true;
  /** Sizes per read: the first batch's only, so the first byte waits for no more than it needs. */
  #sizeChunk: number;

  private constructor(
    private readonly snap: Snapshot,
    private readonly limits: CursorLimits,
  ) {
    this.#sizeChunk = limits.firstRows;
    this.#ahead = this.#readAhead(this.#request(limits.firstRows, limits.startMs));
  }

  /** Declares both cursors for book `bookId` and asks for the first batch. */
  static async open(snap: Snapshot, opts: DocumentQueryOptions, bookId: string, limits: CursorLimits): Promise<DocumentCursor> {
    const declare = (name: string, query: string) =>
      snap.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${query}`, [bookId], { timeoutMs: limits.startMs });
    await Promise.all([declare(SIZES, documentSizeQuery(opts)), declare(ROWS, documentQuery(opts))]);
    return new DocumentCursor(snap, limits);
  }

  /**
   * The next batch, and asks for the one after it; `[]` for the first batch of an empty book and
   * null once every row was returned. Rejects with the snapshot's failure.
   */
  async next(): Promise<DocumentRow[] | null> {
    if (this.#ahead === null) return null;
    const ahead = typeof this.#ahead === 'function' ? this.#ahead() : this.#ahead;
    const { asked, rows: pending } = await ahead;
    const rows = await pending;
    const first = this.#first;
    this.#first = false;
    // FETCH returns fewer rows than asked only at the cursor's end.
    const more = asked !== 0 && rows.length === asked;
    // A row larger than the budget is not read ahead: it comes when asked for, so no more than one
    // such document is in memory for the cursor (decisions.md D8.4).
    const ask = () => this.#request(this.limits.maxRows, this.limits.fetchMs);
    this.#ahead = !more ? null : this.#nextIsOversized() ? ask : this.#readAhead(ask());
    return rows.length === 0 && !first ? null : rows;
  }

  /**
   * A batch asked for ahead. The export may stop before it wants it (its client left, the
   * snapshot failed): its rejection is then nobody's to handle, and must not count as unhandled,
   * which would end the process.
   */
  #readAhead(request: Promise<Request>): Promise<Request> {
    request.catch(() => {});
    return request;
  }

  /** Whether the next row is known to exceed the budget on its own. */
  #nextIsOversized(): boolean {
    const size = this.#sizes[this.#head];
    return size !== undefined && size + ROW_OVERHEAD_BYTES > this.limits.budgetBytes;
  }

  /** Closes both cursors (the transaction's end would too; this frees their memory earlier). */
  async close(): Promise<void> {
    await this.snap.query(`CLOSE ${ROWS}; CLOSE ${SIZES}`, [], { timeoutMs: this.limits.fetchMs });
  }

  /** Asks for the rows of at most `maxRows` that fit the budget. */
  async #request(maxRows: number, timeoutMs: number): Promise<Request> {
    await this.#ensureSizes(maxRows);
    const asked = rowsWithinBudget(this.#sizes, this.#head, this.limits.budgetBytes, maxRows);
    this.#head += asked;
    if (asked === 0) return { asked, rows: Promise.resolve([]) };
    const rows = this.snap.query<DocumentRow[]>(`FETCH FORWARD ${asked} FROM ${ROWS}`, [], { raw: true, timeoutMs });
    // Awaited by next(); until then a rejection must not count as unhandled.
    rows.catch(() => {});
    // Queued behind the batch on the connection, never ahead of it.
    this.#readSizesAhead();
    return { asked, rows };
  }

  /** Waits until `count` sizes are buffered or the size cursor is exhausted. */
  async #ensureSizes(count: number): Promise<void> {
    while (this.#sizes.length - this.#head < count && !this.#sizesDone) {
      this.#readSizesAhead(true);
      await this.#sizesPending;
    }
  }

  /** Starts reading the next chunk of sizes when fewer than a batch's worth are buffered. */
  #readSizesAhead(force = false): void {
    if (this.#sizesDone || this.#sizesPending !== null) return;
    if (!force && this.#sizes.length - this.#head >= this.limits.maxRows) return;
    const chunk = this.#sizeChunk;
    this.#sizeChunk = Math.max(1024, 2 * this.limits.maxRows);
    const reading = this.snap.query<[Buffer][]>(`FETCH FORWARD ${chunk} FROM ${SIZES}`, [], { raw: true, timeoutMs: this.limits.fetchMs });
    this.#sizesPending = reading.then(
      (rows) => {
        // Drop what was used, so the buffer never holds more than a chunk and a batch.
        this.#sizes = this.#sizes.slice(this.#head);
        this.#head = 0;
        for (const row of rows) this.#sizes.push(Number(row[0].toString('latin1')));
        if (rows.length < chunk) this.#sizesDone = true;
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
