/** The rows the encoder reads, in the columns and order snapshot/query.ts selects. */

export interface BookRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  cover_image: string | null;
  created_at: string;
  updated_at: string;
  /** A random UUID, new in every transaction that changes the export's data (decisions.md D9.1). */
  export_version: string;
}

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
  /** The document's id as stored, for its rewrite plan; NULL when contentHtml is not exported or is NULL or empty. */
  id: 5,
} as const;

export type DocumentRow = [head: Buffer, coverUrl: Buffer | null, coverPosition: Buffer | null, tail: Buffer | null, contentHtml: Buffer | null, id: Buffer | null];
