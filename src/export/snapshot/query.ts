/**
 * The export's SQL: the book lookup and the document cursor's query. Only exported columns are
 * selected, never the editor formats (export-api.md 2.2 rule 2, decisions.md D7.2); timestamps are
 * formatted by PostgreSQL as ISO 8601 UTC with milliseconds (decisions.md D2.6).
 */

const iso = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** Book columns in the order of export-api.md table 2.1, then the export version; `$1` owner id, `$2` slug. */
const BOOK_QUERY = `
  SELECT id, slug, name, description, cover_image, ${iso('created_at')} AS created_at, ${iso('updated_at')} AS updated_at,
         export_version::text AS export_version
  FROM books
  WHERE owner_id = $1 AND slug = $2`;

/** A book row as BOOK_QUERY returns it. */
/**
 * The knowledge base `slug` of `userId` (export-api.md 4.1 rule 6), read through `run` (the lookup
 * pool or an export's snapshot); undefined when there is none. A NUL byte can never be in a stored
 * slug, and PostgreSQL rejects it in text parameters, so such a slug is not looked up.
 */
export async function findBook(
  run: (text: string, params: string[]) => Promise<BookRow[]>,
  userId: string,
  slug: string,
): Promise<BookRow | undefined> {
  if (slug.includes('\0')) return undefined;
  return (await run(BOOK_QUERY, [userId, slug]))[0];
}

export interface BookRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  cover_image: string | null;
  created_at: string;
  updated_at: string;
  /**
   * A random UUID as text, new in every transaction that changes what the export holds; equal
   * versions promise equal export data (sql/0003_export_version_random.sql, decisions.md D9.1).
   */
  export_version: string;
}

/**
 * Document columns in the order of export-api.md table 2.2, as positional values: rows are fetched
 * raw (postgres.js `.raw()`), as arrays of Buffers that are never decoded into strings on the hot path.
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
  plan: 18,
} as const;

/**
 * A document row as the cursor returns it: each column's JSON text as UTF-8 bytes (PostgreSQL's
 * `to_json`, so strings arrive quoted and escaped), except `coverUrl`, which is the stored text
 * because the encoder rewrites it (decisions.md D3.6). NULL columns are null.
 */
export type DocumentRow = [
  id: Buffer,
  slug: Buffer,
  name: Buffer,
  type: Buffer,
  parentId: Buffer | null,
  orderKey: Buffer,
  description: Buffer | null,
  emojiInfo: Buffer | null,
  coverUrl: Buffer | null,
  coverPosition: Buffer | null,
  tags: Buffer | null,
  themeId: Buffer | null,
  backgroundThemeId: Buffer | null,
  bodyFontSize: Buffer | null,
  createdAt: Buffer,
  updatedAt: Buffer,
  contentStr: Buffer | null,
  contentHtml: Buffer | null,
  plan: Buffer | null,
];

export interface DocumentQueryOptions {
  /** decisions.md D4.3: drop only nodes whose type is `category`. */
  excludeCategories: boolean;
  /** export-api.md 4.1: when false, contentHtml is not even read. */
  includeContentHtml: boolean;
}

/**
 * FROM and WHERE of both cursors: active documents of book `$1` (export-api.md 4.1 rule 1, D4.3),
 * `joined` to their stored rewrite plans (sql/0005_rewrite_plans.sql), whose columns no documents
 * column shares a name with.
 */
function documentsOf(opts: DocumentQueryOptions, joined = ''): string {
  return `FROM documents${joined}
  WHERE book_id = $1 AND status = 1${opts.excludeCategories ? ` AND type <> 'category'` : ''}`;
}

/** Byte-wise order key, then id (decisions.md D1.1, D1.2), served by documents_export_idx. */
const ORDER = 'ORDER BY order_key, id';

/**
 * The cursor's query; `$1` is the book id. A column added here must join the exported columns that
 * sql/0003_export_version_random.sql compares, or changes to it would not change the export version. Active documents only (export-api.md 4.1 rule 1),
 * ordered by order key then id, byte-wise (decisions.md D1.1, D1.2), served by documents_export_idx.
 * PostgreSQL escapes every string as JSON (`to_json`), so the server passes the bytes through
 * instead of decoding, escaping and encoding them again; the encoder applies the D2 rules. With
 * contentHtml, the last column is the document's stored rewrite plan, its key first (bytea as
 * PostgreSQL's hex text: readStoredPlan in rewrite/plan-store.ts), NULL when it has none; an index
 * probe per row on the plans' primary key.
 */
export function documentQuery(opts: DocumentQueryOptions): string {
  const j = (col: string) => `to_json(${col})`;
  return `
  SELECT ${j('id')}, ${j('slug')}, ${j('name')}, ${j('type')}, ${j('parent_id')}, ${j('order_key')},
         ${j('description')}, ${j('emoji_info')}, cover_url, ${j('cover_position')}, ${j('tags')},
         ${j('theme_id')}, ${j('background_theme_id')}, ${j('body_font_size')},
         ${j(iso('created_at'))}, ${j(iso('updated_at'))},
         ${j('content_str')}, ${opts.includeContentHtml ? `${j('content_html')}, plan_key || plan` : 'NULL::json, NULL::bytea'}
  ${documentsOf(opts, opts.includeContentHtml ? ' LEFT JOIN rewrite_plans ON document_id = id' : '')}
  ${ORDER}`;
}

/**
 * The size cursor's query (decisions.md D8.4): for each row documentQuery returns, in the same
 * order, the bytes of its stored variable-length columns as one int8. `octet_length` of a text
 * value is answered from its TOAST header without detoasting it, so this reads no document body;
 * tags are small and are measured as text. JSON escaping adds to this (a few per cent for usual
 * text, at most 6 × for control characters), and the fixed-size columns add a constant per row.
 */
export function documentSizeQuery(opts: DocumentQueryOptions): string {
  const len = (col: string) => `coalesce(octet_length(${col}), 0)`;
  const cols = ['id', 'slug', 'name', 'type', 'parent_id', 'order_key', 'description', 'emoji_info', 'cover_url',
    'cover_position', 'theme_id', 'background_theme_id', 'content_str'];
  if (opts.includeContentHtml) cols.push('content_html');
  return `
  SELECT (${cols.map(len).join(' + ')} + ${len("array_to_string(tags, ',')")})::int8
  ${documentsOf(opts)}
  ${ORDER}`;
}
