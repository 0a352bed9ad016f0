/**
 * Batches bounded in bytes before they are fetched (D8.4): PostgreSQL cuts them (batch-query.ts),
 * a statement per batch in the export's snapshot; the next two are asked for as soon as the one
 * before each arrives, none that is one document larger than the budget before it is wanted.
 */
import { EMPTY_BATCH, parseBatch, type Batch } from './rows.js';
import type { ResumePosition } from '../request/export-request.js';
import { sinceFilter, type ChangeSince, sinceParams } from './changes-query.js';
import { AFTER_POSITION, type DocumentQueryOptions } from './query.js';
import { batchStatements, type BatchStatements } from './batch-query.js';
import type { Snapshot } from './snapshot.js';

interface CursorLimits {
  budgetBytes: number;
  maxRows: number;
  firstRows: number;
  /** Framing PostgreSQL writes between the documents of a batch (body-format.ts). */
  between: string;
  after: string;
  /** Timeouts, ms: startMs for the first batch, fetchMs for later ones. */
  startMs: number;
  fetchMs: number;
}

/**
 * Batches asked for before they are wanted. With one, PostgreSQL waited while Node still read the
 * batch it had just sent; with two it works on the next one meanwhile.
 */
const AHEAD = 2;
/** A batch not asked for: it is one document larger than the budget, and comes only when wanted (D8.4). */
const DEFERRED = 'deferred';
type Ahead = Batch | null | typeof DEFERRED;

/** Which documents of the book the cursor reads: all, those changed since a token (D12.2), or those after a position (D13.1). */
export type DocumentSelection = { all: true } | { since: ChangeSince } | { after: ResumePosition };

/** The batches' SQL for `selection`, and its parameters. */
function selectionQuery(
  opts: DocumentQueryOptions,
  limits: CursorLimits,
  bookId: string,
  selection: DocumentSelection,
) {
  const { budgetBytes, firstRows, maxRows, between, after } = limits;
  const shape = { budgetBytes, firstRows, maxRows, between, after };
  if ('since' in selection) {
    const params = [bookId, ...sinceParams(selection.since)];
    return { sql: batchStatements(opts, shape, params.length, sinceFilter(opts)), params };
  }
  if ('after' in selection) {
    const params = [bookId, selection.after.orderKey, selection.after.id];
    return { sql: batchStatements(opts, shape, params.length, AFTER_POSITION), params };
  }
  return { sql: batchStatements(opts, shape, 1), params: [bookId] };
}

export class DocumentCursor {
  /** The next batches in order, each asked for once the one before it arrived. */
  #ahead: Promise<Ahead>[] = [];
  #first = true;
  /** Rows the next batch may hold, from the last one's (#fetch), within maxRows. */
  #rows: number;

  private constructor(
    private readonly snap: Snapshot,
    private readonly sql: BatchStatements,
    private readonly params: readonly string[],
    private readonly limits: CursorLimits,
  ) {
    this.#rows = limits.firstRows;
    this.#ahead = [this.#readAhead(this.#fetch(null, limits.startMs))];
  }

  /** Prepares the batches over the documents `selection` names and asks for the first. */
  static open(
    snap: Snapshot,
    opts: DocumentQueryOptions,
    bookId: string,
    selection: DocumentSelection,
    limits: CursorLimits,
  ): Promise<DocumentCursor> {
    const { sql, params } = selectionQuery(opts, limits, bookId, selection);
    return Promise.resolve(new DocumentCursor(snap, sql, params, limits));
  }

  /** An empty batch for the first of an empty book, null once every batch was returned. */
  async next(): Promise<Batch | null> {
    const ahead = this.#ahead.shift();
    if (ahead === undefined) return this.#first ? EMPTY_BATCH : null;
    let batch = await ahead;
    if (batch === DEFERRED) {
      // What is queued behind it waited for it, and was not asked for either.
      this.#ahead = [];
      batch = await this.#fetch(this.#last, this.limits.fetchMs);
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

  /** The last batch asked for that arrived: where a deferred one starts. */
  #last: Batch | null = null;

  /** Asks for batches up to AHEAD, none past a document larger than the budget, so at most one is in memory (D8.4). */
  #fill(returned: Batch): void {
    const after = (b: Ahead): Ahead | Promise<Ahead> =>
      b === null || b === DEFERRED || b.after === null
        ? null
        : b.nextOversized
          ? DEFERRED
          : this.#fetch(b, this.limits.fetchMs);
    if (this.#ahead.length === 0 && returned.after === null) return;
    while (this.#ahead.length < AHEAD) {
      const before = this.#ahead.at(-1);
      this.#ahead.push(this.#readAhead(before === undefined ? Promise.resolve(after(returned)) : before.then(after)));
    }
  }

  /** The export may stop before it wants this batch; its rejection must not then end the process. */
  #readAhead<T>(request: Promise<T>): Promise<T> {
    request.catch(() => {});
    return request;
  }

  /** The batch after `before` (null: the first), null when the selection has no document there. */
  async #fetch(before: Batch | null, timeoutMs: number): Promise<Batch | null> {
    const rows = this.#rows;
    const [text, params] =
      before === null
        ? [this.sql.first, [...this.params, String(rows)]]
        : [this.sql.next, [...this.params, String(rows), ...before.after!]];
    // Prepared: planning the statement took about as long as running it for a batch of small documents.
    const got = await this.snap.query<(Buffer | null)[][]>(text, params, { raw: true, prepare: true, timeoutMs });
    if (got.length === 0) return null;
    const batch = parseBatch(got[0]!, this.limits.budgetBytes);
    this.#last = batch;
    // PostgreSQL sizes every row it is allowed and keeps those within the budget: ask for about as
    // many as the last batch held, twice as many when the row cap was what cut it.
    const cut = batch.count === rows ? 2 * rows + 16 : batch.count + (batch.count >> 2) + 16;
    this.#rows = Math.min(this.limits.maxRows, cut);
    return batch;
  }

  /** Nothing to close: each batch is a statement of its own. */
  async close(): Promise<void> {}
}
