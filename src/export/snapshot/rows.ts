/** The rows the document cursor reads, in the columns and order query.ts selects; the later stages read them as they are. */

/** Document row positions (snapshot/query.ts): PostgreSQL writes the JSON of all fields the rewrite stage leaves alone. */
export const DOC = {
  /** `{"id":…` through `,"cover":`; without a cover, through `,"contentHtml":` (the cover's null and the tail). */
  head: 0,
  /** The stored cover URL, to be rewritten (D3.6); NULL when there is none. */
  coverUrl: 1,
  /** The cover position's JSON text, its default applied (D2.4); NULL without a cover. */
  coverPosition: 2,
  /** `,"tags":…` through `,"contentHtml":`: the fields between the cover and contentHtml; NULL without a cover. */
  tail: 3,
  /** contentHtml's JSON text; NULL when it is NULL or empty (D2.1) or not asked for. */
  contentHtml: 4,
  /** The stored rewrite plan (its key, then the plan) as bytea's hex text; NULL when none is stored or read. */
  plan: 5,
} as const;

export type DocumentRow = [
  head: Buffer,
  coverUrl: Buffer | null,
  coverPosition: Buffer | null,
  tail: Buffer | null,
  contentHtml: Buffer | null,
  plan: Buffer | null,
];

/**
 * Bytes of a row's values, as fetched. An indexed loop: under --optimize-for-size a for-of made an
 * iterator and a result per value.
 */
export function rowBytes(row: DocumentRow): number {
  let n = 0;
  for (let c = 0; c < row.length; c++) n += row[c]?.length ?? 0;
  return n;
}

const ID_AT = '{"id":'.length;

/** The document's id, read from the head's JSON (`{"id":"…"`): what a plan is written under. */
export function documentIdOf(row: DocumentRow): string {
  const head = row[DOC.head];
  let end = ID_AT + 1;
  while (end < head.length && head[end] !== 0x22) end += head[end] === 0x5c ? 2 : 1;
  return JSON.parse(head.toString('utf8', ID_AT, end + 1)) as string;
}

/** A document of a batch that the rewrite stage reads: its pieces, and where they sit in the batch's text. */
export interface PiecesAt {
  /** Offset of its marker byte in the batch's text; the text before it is written as it is. */
  at: number;
  /** Offset just past its pieces. */
  end: number;
  row: DocumentRow;
}

/** One row of the batch cursor (batch-query.ts): documents as finished JSON text, some as pieces. */
export interface Batch {
  count: number;
  /** The documents' text, framing included; each document in pieces starts with a marker byte (0x01). */
  text: Buffer;
  pieces: PiecesAt[];
  /** The next batch is one document larger than the budget: asked for only when wanted (D8.4). */
  nextOversized: boolean;
  /** Where the next batch starts: after this order key and id; null when no document follows. */
  after: [orderKey: string, id: string] | null;
}

export const EMPTY_BATCH: Batch = { count: 0, text: Buffer.alloc(0), pieces: [], nextOversized: false, after: null };

const MARKER = 0x01;
const PIECES = 6;

/**
 * The batch a row holds, `[count, text, layout, nextSize, orderKey, id]` as PostgreSQL's text: the layout
 * lists each marked document's six piece lengths, -1 for NULL, in order. Rows are views of the text.
 */
export function parseBatch(raw: (Buffer | null)[], budgetBytes: number): Batch {
  const text = raw[1] ?? Buffer.alloc(0);
  const layout = raw[2];
  const pieces: PiecesAt[] = [];
  if (layout !== null && layout !== undefined) {
    let l = 0;
    let from = 0;
    while (l < layout.length) {
      const at = text.indexOf(MARKER, from);
      if (at < 0) throw new Error('a batch names more documents in pieces than its text holds');
      let p = at + 1;
      const row = new Array<Buffer | null>(PIECES);
      for (let c = 0; c < PIECES; c++) {
        let n = 0;
        let negative = false;
        for (; l < layout.length && layout[l] !== 0x2c; l++) {
          if (layout[l] === 0x2d) negative = true;
          else n = n * 10 + layout[l]! - 0x30;
        }
        l++;
        row[c] = negative ? null : text.subarray(p, (p += n));
      }
      pieces.push({ at, end: p, row: row as DocumentRow });
      from = p;
    }
  }
  const next = raw[3] ?? null;
  return {
    count: decimal(raw[0]!),
    text,
    pieces,
    nextOversized: next !== null && decimal(next) > budgetBytes,
    after: next === null ? null : [raw[4]!.toString('utf8'), raw[5]!.toString('utf8')],
  };
}

/** A non-negative integer as PostgreSQL's text format writes it, read without a string. */
function decimal(text: Buffer): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) n = n * 10 + text[i]! - 0x30;
  return n;
}

/** Bytes of a batch as fetched. */
export const batchBytes = (batch: Batch): number => batch.text.length;
