/** A delta's SQL (decisions.md D12.2, D12.3): `$1` the book id, `$2` the change token's pg_snapshot. */
import { documentQuery, documentSizeQuery, type DocumentQueryOptions } from './query.js';

/** Written by a transaction not visible in `$2`; the `>=` lets an index find the candidates. */
const since = (col: string) =>
  `${col} >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(${col}, $2::pg_snapshot)`;

/** Through documents_changes_idx, then sorted: a delta reads what changed, not the book. */
export function changedDocumentQuery(opts: DocumentQueryOptions): string {
  return documentQuery(opts, since('changed_xid'));
}

/** The size cursor of changedDocumentQuery: same rows, same order (decisions.md D8.4). */
export function changedDocumentSizeQuery(opts: DocumentQueryOptions): string {
  return documentSizeQuery(opts, since('changed_xid'));
}

/**
 * The ids, as JSON text, of documents that left this option set's export since `$2` and are not in it
 * now, byte-wise ascending. Only with excludeCategories did one made a category leave; one that was a
 * category when it left was never in it.
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

export interface ChangeState {
  bookId: string;
  /** One incarnation of the book. */
  changeEpoch: string;
  snapshot: string;
  inRecovery: boolean;
  nowS: number;
  /** A token whose snapshot's xmin is below it is expired. */
  tokenFloor: string;
  /** The cluster's system identifier and the database's oid: a restore elsewhere differs. */
  databaseId: string;
}

const CHANGE_STATE_QUERY = `
  SELECT b.change_epoch::text AS change_epoch, pg_current_snapshot()::text AS snapshot,
         pg_is_in_recovery() AS in_recovery, extract(epoch FROM now())::float8 AS now_s,
         t.token_floor::text AS token_floor,
         (SELECT system_identifier::text FROM pg_control_system()) || '/' ||
           (SELECT oid::text FROM pg_database WHERE datname = current_database()) AS database_id
  FROM books b CROSS JOIN change_tracking t
  WHERE b.id = $1`;

interface ChangeStateRow {
  change_epoch: string;
  snapshot: string;
  in_recovery: boolean;
  now_s: number;
  token_floor: string;
  database_id: string;
}

/** Run it in the export's snapshot. Throws when the book is not there or the schema is behind 0006. */
export async function readChangeState(
  run: (text: string, params: string[]) => Promise<ChangeStateRow[]>,
  bookId: string,
): Promise<ChangeState> {
  const [row] = await run(CHANGE_STATE_QUERY, [bookId]);
  if (!row) throw new Error(`no change state for book ${JSON.stringify(bookId)}: is the schema migrated to 0006?`);
  return {
    bookId,
    changeEpoch: row.change_epoch,
    snapshot: row.snapshot,
    inRecovery: row.in_recovery,
    nowS: row.now_s,
    tokenFloor: row.token_floor,
    databaseId: row.database_id,
  };
}
