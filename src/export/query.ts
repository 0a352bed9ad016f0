/**
 * The export's SQL: the book lookup and the document cursor's query. Only exported columns are
 * selected, never the editor formats (export-api.md 2.2 rule 2, decisions.md D7.2); timestamps are
 * formatted by PostgreSQL as ISO 8601 UTC with milliseconds (decisions.md D2.6).
 */

const iso = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** Book columns in the order of export-api.md table 2.1; `$1` owner id, `$2` slug. */
export const BOOK_QUERY = `
  SELECT id, slug, name, description, cover_image, ${iso('created_at')} AS created_at, ${iso('updated_at')} AS updated_at
  FROM books
  WHERE owner_id = $1 AND slug = $2`;

/** A book row as BOOK_QUERY returns it. */
export interface BookRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  cover_image: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * Document columns in the order of export-api.md table 2.2, as positional values: rows are fetched
 * as arrays, which skips building an object per row.
 */
export const DOC = {
  id: 0,
  slug: 1,
  name: 2,
  type: 3,
  parentId: 4,
  orderKey: 5,
  description: 6,
  emojiInfo: 7,
  coverUrl: 8,
  coverPosition: 9,
  tags: 10,
  themeId: 11,
  backgroundThemeId: 12,
  bodyFontSize: 13,
  createdAt: 14,
  updatedAt: 15,
  contentStr: 16,
  contentHtml: 17,
} as const;

export type DocumentRow = [
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

export interface DocumentQueryOptions {
  /** decisions.md D4.3: drop only nodes whose type is `category`. */
  excludeCategories: boolean;
  /** export-api.md 4.1: when false, contentHtml is not even read. */
  includeContentHtml: boolean;
}

/**
 * The cursor's query; `$1` is the book id. Active documents only (export-api.md 4.1 rule 1),
 * ordered by order key then id, byte-wise (decisions.md D1.1, D1.2), served by documents_export_idx.
 */
export function documentQuery(opts: DocumentQueryOptions): string {
  return `
  SELECT id, slug, name, type, parent_id, order_key, description, emoji_info, cover_url, cover_position,
         tags, theme_id, background_theme_id, body_font_size,
         ${iso('created_at')}, ${iso('updated_at')},
         content_str, ${opts.includeContentHtml ? 'content_html' : 'NULL::text'}
  FROM documents
  WHERE book_id = $1 AND status = 1${opts.excludeCategories ? ` AND type <> 'category'` : ''}
  ORDER BY order_key, id`;
}
