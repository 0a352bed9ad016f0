/**
 * Document rows built without a database, for the encoder's benchmark and tests: the cursor's row
 * (src/export/snapshot/query.ts DocumentRow) for a document's stored values.
 */
import { DOC, type DocumentRow } from '../../src/export/snapshot/query.js';

/** A document's stored values in DOC order, timestamps as ISO 8601 strings . */
export type DocumentValues = [
  id: string,
  slug: string,
  name: string,
  type: string,
  parentId: string | null,
  orderKey: string,
  description: string | null,
  emojiInfo: string | null,
  coverUrl: string | null,
  coverPosition: string | null,
  tags: string[] | null,
  themeId: string | null,
  backgroundThemeId: string | null,
  bodyFontSize: string | null,
  createdAt: string,
  updatedAt: string,
  contentStr: string | null,
  contentHtml: string | null,
];

/**
 * The row the cursor returns for these stored values, with JSON.stringify standing in for
 * PostgreSQL's `to_json` (both escape `"`, `\` and control characters and leave other characters
 * as they are). For tests and benchmarks that encode rows without a database.
 */
export function rowFromValues(v: DocumentValues): DocumentRow {
  const json = (x: unknown) => (x === null ? null : Buffer.from(JSON.stringify(x)));
  return v.map((x, i) => (i === DOC.coverUrl ? (x === null ? null : Buffer.from(x as string)) : json(x))) as DocumentRow;
}
