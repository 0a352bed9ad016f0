/**
 * A delta's SQL (D12.2, D12.3): `$1` the book id, `$2` and `$3` what the change token's
 * snapshot saw (change-token.ts `ChangeSince`): a pg_snapshot, and xids it saw beyond it.
 */
import { documentQuery, documentSizeQuery, type DocumentQueryOptions } from './query.js';

/**
 * Written by a transaction the token's snapshot did not see; the `>=` lets an index find the
 * candidates. `$3` lists transactions at or above `$2`'s xmin that the snapshot saw all the same:
 * a token that cannot list what was running names what had finished instead (change-token.ts).
 */
const since = (col: string) =>
  `${col} >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(${col}, $2::pg_snapshot) AND ${col} <> ALL($3::xid8[])`;

/** Without contentHtml, a change to the HTML alone is none (sql/0007_changes_without_html.sql). */
const changedColumn = (opts: Pick<DocumentQueryOptions, 'includeContentHtml'>) =>
  opts.includeContentHtml ? 'changed_xid' : 'changed_xid_no_html';

/** Through the changed column's index, then sorted: a delta reads what changed, not the book. */
export function changedDocumentQuery(opts: DocumentQueryOptions): string {
  return documentQuery(opts, since(changedColumn(opts)));
}

/** The size cursor of changedDocumentQuery: same rows, same order (D8.4). */
export function changedDocumentSizeQuery(opts: DocumentQueryOptions): string {
  return documentSizeQuery(opts, since(changedColumn(opts)));
}

/**
 * The ids, as JSON text, of documents that left this option set's export since the token and are not
 * in it now, byte-wise ascending. Only with excludeCategories did one made a category leave; one that
 * was a category when it left was never in it.
 */
export function removedQuery(opts: Pick<DocumentQueryOptions, 'excludeCategories'>): string {
  const left = opts.excludeCategories ? 'NOT was_category' : `reason <> 'category'`;
  return `
  SELECT to_json(r.document_id)
  FROM (SELECT DISTINCT document_id FROM document_removals
        WHERE book_id = $1 AND ${since('removed_xid')} AND ${left}) r
  WHERE NOT EXISTS (
    SELECT 1 FROM documents d
    WHERE d.id = r.document_id AND d.book_id = $1 AND d.status = 1${opts.excludeCategories ? ` AND d.type <> 'category'` : ''})
  ORDER BY r.document_id`;
}

/**
 * The parameters `$2` and `$3` of a delta's SQL: a pg_snapshot, and the xids at or above its xmin
 * that it saw all the same, as an array literal (change-token.ts).
 */
export interface ChangeSince {
  snapshot: string;
  visible: string;
}

/** A delta's parameters after the book id. */
export const sinceParams = (s: ChangeSince): [string, string] => [s.snapshot, s.visible];
