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
 * Bytes of a row's values, as fetched, by an indexed loop: a for-of's iterator results were garbage per value.
 */
export function rowBytes(row: DocumentRow): number {
  let n = 0;
  for (let c = 0; c < row.length; c++) n += row[c]?.length ?? 0;
  return n;
}

const ID_AT = '{"id":'.length;

/**
 * The document's id, read from the head's JSON (`{"id":"…"`): what a plan is written under. Without
 * a backslash the JSON string's bytes are the id's UTF-8; JSON.parse only for an escaped one.
 */
export function documentIdOf(row: DocumentRow): string {
  const head = row[DOC.head];
  let end = ID_AT + 1;
  let escaped = false;
  while (end < head.length && head[end] !== 0x22) {
    if (head[end] === 0x5c) {
      escaped = true;
      end += 2;
    } else end++;
  }
  return escaped
    ? (JSON.parse(head.toString('utf8', ID_AT, end + 1)) as string)
    : head.toString('utf8', ID_AT + 1, end);
}
