/** The export's SQL: exported columns only, never the editor formats (export-api.md 2.2 rule 2, D7.2). */
import type { ExportOptions } from '../request/export-request.js';

export interface DocumentQueryOptions extends ExportOptions {
  /** Read each row's stored rewrite plan with it (REWRITE_PLANS); only with includeContentHtml. */
  withPlans?: boolean;
}

/** Active documents of book `$1` (export-api.md 4.1 rule 1, D4.3); `filter`: a delta's (D12.2). */
function documentsOf(opts: DocumentQueryOptions, filter = ''): string {
  return `FROM documents
  WHERE book_id = $1 AND status = 1${opts.excludeCategories ? ` AND type <> 'category'` : ''}${filter ? ` AND (${filter})` : ''}`;
}

/**
 * The documents after a position in the export's order (D13.1): `$2` an order key, `$3` an id,
 * compared as the ORDER BY does (both columns are COLLATE "C"), so the index starts there.
 */
export const AFTER_POSITION = '(order_key, id) > ($2, $3)';

/** Byte-wise order key, then id (D1.1, D1.2), served by documents_export_idx. */
const ORDER = 'ORDER BY order_key, id';

/** A column's JSON text, `def` when it is NULL or '' (D2.2-D2.4). */
const withDefault = (col: string, def: string) => `to_json(coalesce(nullif(${col}, ''), '${def}'))::text`;

const plansRead = (opts: DocumentQueryOptions) => opts.includeContentHtml && opts.withPlans === true;

/** The stored plan of a row with contentHtml: one index probe, never a join the planner could turn into a scan. */
const storedPlan = (value: string) =>
  `CASE WHEN content_html <> '' THEN (SELECT ${value} FROM rewrite_plans WHERE document_id = documents.id) END`;

/** The fixed fields' JSON text as sql/0009 stores it, built by its functions where a row's is still NULL. */
const HEAD =
  'coalesce(export_head, kbx_export_head(id, slug, name, type, parent_id, order_key, description, emoji_info))';
const MID =
  'coalesce(export_mid, kbx_export_mid(tags, theme_id, background_theme_id, body_font_size, created_at, updated_at))';
/** contentStr's and contentHtml's JSON text as sql/0010 stores it, likewise; NULL stands for '' too (D2.1). */
const STR = "coalesce(export_str, kbx_export_str(content_str), 'null')";
const HTML = 'coalesce(export_html, kbx_export_html(content_html))';

/**
 * Six values per row, three of them NULL for a document without a cover, the stored plan NULL
 * unless there is one (encode/rows.ts): each non-NULL value is an object per row in Node. Reading
 * the plan here, not in a query per batch, spares that query's wait behind the next FETCH. The
 * fields before the cover and between it and contentHtml are read as sql/0009 and sql/0010 keep
 * them (their functions define the bytes). A column added here must join those sql/0003 and
 * sql/0006 compare, or its changes would reach neither the export version nor a delta.
 */
export function documentQuery(opts: DocumentQueryOptions, filter = ''): string {
  const tail = `${MID} || ${STR} || ',"contentHtml":'`;
  // Without a cover nothing before contentHtml is rewritten: one value instead of four, fewer objects per row.
  const coverless = (yes: string, no: string) => `CASE WHEN nullif(cover_url, '') IS NULL THEN ${yes} ELSE ${no} END`;
  return `
  SELECT ${coverless(`${HEAD} || 'null' || ${tail}`, HEAD)}, ${coverless('NULL', 'cover_url')},
         ${coverless('NULL', withDefault('cover_position', 'center'))}, ${coverless('NULL', tail)},
         ${opts.includeContentHtml ? HTML : 'NULL::text'}, ${plansRead(opts) ? storedPlan('plan_key || plan') : 'NULL::bytea'}
  ${documentsOf(opts, filter)}
  ${ORDER}`;
}

/**
 * Each row's variable-length bytes (D8.4): `octet_length` reads a TOAST header, not the
 * body. A stored plan arrives as bytea's hex text, two characters a byte.
 */
export function documentSizeQuery(opts: DocumentQueryOptions, filter = ''): string {
  const len = (col: string) => `coalesce(octet_length(${col}), 0)`;
  const cols = [
    'id',
    'slug',
    'name',
    'type',
    'parent_id',
    'order_key',
    'description',
    'emoji_info',
    'cover_url',
    'cover_position',
    'theme_id',
    'background_theme_id',
    'content_str',
  ];
  if (opts.includeContentHtml) cols.push('content_html');
  const plan = plansRead(opts)
    ? ` + coalesce(${storedPlan('2 + 2 * (octet_length(plan_key) + octet_length(plan))')}, 0)`
    : '';
  return `
  SELECT (${cols.map(len).join(' + ')} + ${len("array_to_string(tags, ',')")}${plan})::int8
  ${documentsOf(opts, filter)}
  ${ORDER}`;
}

/** A row is listed by the size markers when its size is over this many bytes; the others count as this many (D8.4). */
export const SIZE_LISTED_OVER = 512;
/** Every this many rows one is listed whatever its size, so a FETCH of n markers reads at most n times as many rows. */
export const SIZE_MARK_EVERY = 16;

/**
 * The rows of `sizeQuery` (a size per row, in the export's order) PostgreSQL keeps for Node:
 * `(rn, size)` for each row larger than SIZE_LISTED_OVER and each SIZE_MARK_EVERY-th, `rn` its
 * 1-based position. A million small documents cost Node a row object and a Buffer each for
 * their sizes; now one in 16 (bench/optimisations.md). The rows left out are at most
 * SIZE_LISTED_OVER bytes each, so a batch's bound counted with that size still holds (D8.4).
 */
export function sizeMarkerQuery(sizeQuery: string): string {
  return `
  SELECT rn, size FROM (SELECT row_number() OVER () AS rn, size FROM (${sizeQuery}) AS sizes (size)) AS numbered
  WHERE size > ${SIZE_LISTED_OVER} OR rn % ${SIZE_MARK_EVERY} = 0`;
}
