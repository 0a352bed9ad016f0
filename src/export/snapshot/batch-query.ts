/**
 * The export's SQL as batches (D8.4): each row of the cursor is one batch, cut by PostgreSQL with a
 * running sum of the rows' sizes, so no size cursor runs beside it. A batch's documents that need
 * nothing from the server (no cover, no contentHtml) arrive as their finished JSON text, framing
 * included; the others as the pieces the rewrite stage reads (rows.ts), placed by a layout.
 */
import type { DocumentQueryOptions } from './query.js';
import { ROW_OVERHEAD_BYTES } from './batch-budget.js';

/** How one export's batches are cut and framed. */
export interface BatchShape {
  budgetBytes: number;
  firstRows: number;
  maxRows: number;
  /** Written before every document of a batch but its first, and after every document (body-format.ts). */
  between: string;
  after: string;
}

/** The fixed fields' JSON text as sql/0009 stores it, built by its functions where a row's is still NULL. */
const HEAD =
  'coalesce(export_head, kbx_export_head(id, slug, name, type, parent_id, order_key, description, emoji_info))';
const MID =
  'coalesce(export_mid, kbx_export_mid(tags, theme_id, background_theme_id, body_font_size, created_at, updated_at))';
const STR = `coalesce(to_json(nullif(content_str, ''))::text, 'null')`;

/** The columns a batch is built from: never the editor formats (D7.2). */
const COLUMNS =
  'id, slug, name, type, parent_id, order_key, description, emoji_info, cover_url, cover_position, tags, theme_id, ' +
  'background_theme_id, body_font_size, created_at, updated_at, content_str, content_html, export_head, export_mid';

const literal = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** Each row's variable-length bytes as the size cursor counted them, plus ROW_OVERHEAD_BYTES (D8.4). */
function sizeOf(opts: DocumentQueryOptions, plans: boolean): string {
  const cols = ['id', 'slug', 'name', 'type', 'parent_id', 'order_key', 'description', 'emoji_info', 'cover_url'];
  cols.push('cover_position', 'theme_id', 'background_theme_id', 'content_str');
  if (opts.includeContentHtml) cols.push('content_html');
  const len = (col: string) => `coalesce(octet_length(${col}), 0)`;
  const plan = plans
    ? ` + coalesce(CASE WHEN content_html <> '' THEN (SELECT 2 + 2 * (octet_length(plan_key) + octet_length(plan)) FROM rewrite_plans WHERE document_id = documents.id) END, 0)`
    : '';
  return `(${cols.map(len).join(' + ')} + ${len("array_to_string(tags, ',')")}${plan} + ${ROW_OVERHEAD_BYTES})::int4`;
}

/**
 * One batch from `position` on (null: the selection's start): at most `rows` documents, and no
 * more bytes than the budget unless it is one document alone. One row more than the batch is
 * sized, so the batch says whether the next document is larger than a batch (`next_size`).
 */
function oneBatch(
  opts: DocumentQueryOptions,
  where: string,
  position: string | null,
  rows: string,
  shape: BatchShape,
): string {
  const { budgetBytes: budget } = shape;
  const plans = opts.includeContentHtml && opts.withPlans === true;
  const special = opts.includeContentHtml
    ? `(nullif(cover_url, '') IS NOT NULL OR coalesce(content_html, '') <> '')`
    : `nullif(cover_url, '') IS NOT NULL`;
  const html = opts.includeContentHtml ? `to_json(nullif(content_html, ''))::text` : 'NULL::text';
  const plan = plans
    ? `CASE WHEN content_html <> '' THEN (SELECT (plan_key || plan)::text FROM rewrite_plans WHERE document_id = a.id) END`
    : 'NULL::text';
  const tail = `${MID} || ${STR} || ',"contentHtml":'`;
  const coverless = `nullif(cover_url, '') IS NULL`;
  const pieces = `
      SELECT rn, order_key, id, (rn = ${rows} OR next_size IS NULL OR run + next_size > ${budget}) AS last, next_size, sp,
             CASE WHEN NOT sp THEN ${HEAD} || 'null' || ${tail} || 'null}'
                  WHEN ${coverless} THEN ${HEAD} || 'null' || ${tail} ELSE ${HEAD} END AS h,
             CASE WHEN sp AND NOT ${coverless} THEN cover_url END AS cu,
             CASE WHEN sp AND NOT ${coverless} THEN to_json(coalesce(nullif(cover_position, ''), 'center'))::text END AS cp,
             CASE WHEN sp AND NOT ${coverless} THEN ${tail} END AS t,
             CASE WHEN sp THEN ${html} END AS ht,
             CASE WHEN sp THEN ${plan} END AS pl
      FROM (
        SELECT d.*, ${special} AS sp, row_number() OVER w AS rn, sum(size) OVER w AS run, lead(size) OVER w AS next_size
        FROM (SELECT ${COLUMNS}, ${sizeOf(opts, plans)} AS size FROM documents
              WHERE ${where}${position ? ` AND (order_key, id) > ${position}` : ''}
              ORDER BY order_key, id LIMIT ${rows} + 1) d
        WINDOW w AS (ORDER BY order_key, id ROWS UNBOUNDED PRECEDING)
      ) a
      WHERE rn <= ${rows} AND (rn = 1 OR run <= ${budget})
      OFFSET 0`;
  // OFFSET 0 keeps the pieces a subquery of their own: flattened, each was computed twice (the
  // body and the layout), contentHtml's escaping and the plan's probe included.
  const content = `CASE WHEN sp THEN chr(1) || h || coalesce(cu, '') || coalesce(cp, '') || coalesce(t, '') || coalesce(ht, '') || coalesce(pl, '') ELSE h END`;
  const len = (c: string) => `coalesce(octet_length(${c}), -1)`;
  return `
    SELECT count(*)::int AS n,
           string_agg(${content}, ${literal(shape.between + shape.after)}) AS body,
           string_agg(CASE WHEN sp THEN concat_ws(',', ${['h', 'cu', 'cp', 't', 'ht', 'pl'].map(len).join(', ')}) END, ',') AS layout,
           max(next_size) FILTER (WHERE last) AS next_size,
           max(order_key) FILTER (WHERE last) AS k, max(id) FILTER (WHERE last) AS i
    FROM (${pieces}) p
    HAVING count(*) > 0`;
}

/** A batch's two statements: the selection's first batch, and the batch after a position. */
export interface BatchStatements {
  /** Parameters: the selection's, then the row cap. */
  first: string;
  /** Parameters: the selection's, the row cap, then the last order key and id of the batch before. */
  next: string;
}

/**
 * The batches' SQL, one row a batch (n, body, layout, next_size, k, i), `filter` a delta's or a
 * resume's (D12.2, D13.1) over `params` parameters. A statement per batch in the snapshot, not a
 * recursive query under one cursor: PostgreSQL keeps every row a recursive CTE returns, and wrote
 * the whole export to a temporary file (bench/optimisations.md).
 */
export function batchStatements(
  opts: DocumentQueryOptions,
  shape: BatchShape,
  params: number,
  filter = '',
): BatchStatements {
  const where = `book_id = $1 AND status = 1${opts.excludeCategories ? ` AND type <> 'category'` : ''}${filter ? ` AND (${filter})` : ''}`;
  const rows = `$${params + 1}::int`;
  const position = `($${params + 2}::text, $${params + 3}::text)`;
  return { first: oneBatch(opts, where, null, rows, shape), next: oneBatch(opts, where, position, rows, shape) };
}
