/**
 * Batches bounded in bytes before they are fetched (D8.4): PostgreSQL cuts them (batch-query.ts),
 * each row of the cursor one batch; the next two are asked for as soon as the current one arrives,
 * none past a document larger than the budget.
 */
import { EMPTY_BATCH, parseBatch, type Batch } from './rows.js';
import type { ResumePosition } from '../request/export-request.js';
import { sinceFilter, type ChangeSince, sinceParams } from './changes-query.js';
import { AFTER_POSITION, type DocumentQueryOptions } from './query.js';
import { batchQuery, type BatchShape } from './batch-query.js';
import type { Snapshot } from './snapshot.js';

const BATCHES = 'kb_export_cursor';

interface CursorLimits {
  budgetBytes: number;
  maxRows: number;
  firstRows: number;
  /** Framing PostgreSQL writes between and after the documents of a batch (body-format.ts). */
  between: string;
  after: string;
  /** Timeouts, ms: startMs for the DECLARE and the first FETCH, fetchMs for later ones. */
  startMs: number;
  fetchMs: number;
}

/**
 * Batches asked for before they are wanted. With one, PostgreSQL waited while Node still read the
 * rows of the batch it had just sent; with two it works on the next one meanwhile.
 */
const AHEAD = 2;
/** A batch not asked for: it is one document larger than the budget, and comes only when wanted (D8.4). */
const DEFERRED = 'deferred';

/** Which documents of the book the cursor reads: all, those changed since a token (D12.2), or those after a position (D13.1). */
export type DocumentSelection = { all: true } | { since: ChangeSince } | { after: ResumePosition };

/** The batches' SQL for `selection`, and its parameters. */
function selectionQuery(opts: DocumentQueryOptions, shape: BatchShape, bookId: string, selection: DocumentSelection) {
  if ('since' in selection)
    return { text: batchQuery(opts, shape, sinceFilter(opts)), params: [bookId, ...sinceParams(selection.since)] };
  if ('after' in selection) {
    const { orderKey, id } = selection.after;
    return { text: batchQuery(opts, shape, AFTER_POSITION), params: [bookId, orderKey, id] };
  }
  return { text: batchQuery(opts, shape), params: [bookId] };
}

export class DocumentCursor {
  /** The next batches in order, each asked for once the one before it arrived; empty once every row was returned. */
  #ahead: Promise<Batch | null | typeof DEFERRED>[];
  #first = true;
  #done = false;

  private constructor(
    private readonly snap: Snapshot,
    private readonly limits: CursorLimits,
  ) {
    this.#ahead = [this.#readAhead(this.#fetch(limits.startMs))];
  }

  /** Declares the cursor over the documents `selection` names and asks for the first batch. */
  static async open(
    snap: Snapshot,
    opts: DocumentQueryOptions,
    bookId: string,
    selection: DocumentSelection,
    limits: CursorLimits,
  ): Promise<DocumentCursor> {
    const { budgetBytes, firstRows, maxRows, between, after } = limits;
    const { text, params } = selectionQuery(
      opts,
      { budgetBytes, firstRows, maxRows, between, after },
      bookId,
      selection,
    );
    await snap.query(`DECLARE ${BATCHES} NO SCROLL CURSOR FOR ${text}`, params, { timeoutMs: limits.startMs });
    return new DocumentCursor(snap, limits);
  }

  /** An empty batch for the first of an empty book, null once every batch was returned. */
  async next(): Promise<Batch | null> {
    const ahead = this.#ahead.shift();
    if (ahead === undefined) return this.#first ? EMPTY_BATCH : null;
    let batch = await ahead;
    if (batch === DEFERRED) {
      // What is queued behind it waited for it, and was not asked for either.
      this.#ahead = [];
      batch = await this.#fetch(this.limits.fetchMs);
    }
    const first = this.#first;
    this.#first = false;
    if (batch === null) {
      this.#ahead = [];
      return first ? EMPTY_BATCH : null;
    }
    this.#fill(batch);
    return batch;
  }

  /** Asks for batches up to AHEAD, none past a document larger than the budget, so at most one is in memory (D8.4). */
  #fill(returned: Batch): void {
    const after = (b: Batch | null | typeof DEFERRED): Batch | null | typeof DEFERRED | Promise<Batch | null> =>
      b === null || b === DEFERRED ? b : b.nextOversized ? DEFERRED : this.#fetch(this.limits.fetchMs);
    while (this.#ahead.length < AHEAD && !this.#done) {
      const before = this.#ahead.at(-1);
      this.#ahead.push(this.#readAhead(before === undefined ? Promise.resolve(after(returned)) : before.then(after)));
    }
  }

  /** The export may stop before it wants this batch; its rejection must not then end the process. */
  #readAhead<T>(request: Promise<T>): Promise<T> {
    request.catch(() => {});
    return request;
  }

  /** The next batch, null at the cursor's end; after that, nothing more is asked for. */
  async #fetch(timeoutMs: number): Promise<Batch | null> {
    if (this.#done) return null;
    const rows = await this.snap.query<(Buffer | null)[][]>(`FETCH FORWARD 1 FROM ${BATCHES}`, [], {
      raw: true,
      timeoutMs,
    });
    if (rows.length === 0) {
      this.#done = true;
      return null;
    }
    return parseBatch(rows[0]!, this.limits.budgetBytes);
  }

  /** The transaction's end would close it too; this frees its memory earlier. */
  async close(): Promise<void> {
    await this.snap.query(`CLOSE ${BATCHES}`, [], { timeoutMs: this.limits.fetchMs });
  }
}
