/**
 * The change state of a book in the reading transaction's snapshot: what a change token is made
 * from and checked against (change-token.ts, D12.1, D12.7, D12.8).
 */
import { TIMELINE_SQL } from '../db/replica/timeline.js';

export interface ChangeState {
  bookId: string;
  /** One incarnation of the book. */
  changeEpoch: string;
  /** pg_current_snapshot() of the reading transaction; on a hot standby it lists no running xids. */
  snapshot: string;
  inRecovery: boolean;
  nowS: number;
  /** A token whose snapshot's xmin is below it is expired. */
  tokenFloor: string;
  /** The cluster's system identifier and the database's oid: a restore elsewhere differs. */
  databaseId: string;
  /** The WAL timeline the data was read on: a promotion starts a new one (D12.8). */
  timeline: number;
  /**
   * Transactions between the snapshot's xmin and xmax that it saw and that wrote this book (a
   * changed column or a removal), ascending; more than VISIBLE_MAX means "too many to list".
   * Read only on a hot standby or when the snapshot lists over XIP_LISTED_MAX running xids; else null.
   */
  visible: bigint[] | null;
}

/** Running xids up to which a primary's token lists them without asking which ones wrote the book. */
export const XIP_LISTED_MAX = 256;
/** Visible writers of the book listed at most; one more is read to tell "too many". */
export const VISIBLE_MAX = 1024;

const CHANGE_STATE_QUERY = `
  SELECT b.change_epoch::text AS change_epoch, pg_current_snapshot()::text AS snapshot,
         pg_is_in_recovery() AS in_recovery, extract(epoch FROM now())::float8 AS now_s,
         t.token_floor::text AS token_floor,
         (SELECT system_identifier::text FROM pg_control_system()) || '/' ||
           (SELECT oid::text FROM pg_database WHERE datname = current_database()) AS database_id,
         ${TIMELINE_SQL} AS timeline
  FROM books b CROSS JOIN change_tracking t
  WHERE b.id = $1`;

/** Distinct values of `col` within snapshot `$2`'s [xmin, xmax), one index probe each (a loose index scan). */
function distinctIn(table: string, col: string, where: string): string {
  const probe = (from: string) =>
    `(SELECT ${col} FROM ${table} WHERE ${where} AND ${col} ${from} AND ${col} < pg_snapshot_xmax($2::pg_snapshot) ORDER BY ${col} LIMIT 1)`;
  return `(WITH RECURSIVE c(x) AS (
      ${probe('>= pg_snapshot_xmin($2::pg_snapshot)')}
      UNION ALL
      SELECT ${probe('> c.x')} FROM c WHERE c.x IS NOT NULL)
    SELECT x FROM c WHERE x IS NOT NULL LIMIT ${VISIBLE_MAX + 1})`;
}

/** ChangeState.visible of book `$1` in snapshot `$2`, the snapshot of the transaction it runs in. */
const VISIBLE_QUERY = `
  SELECT coalesce(string_agg(v.x::text, ',' ORDER BY v.x), '') AS visible FROM (
    SELECT x FROM (
      ${distinctIn('documents', 'changed_xid', 'book_id = $1 AND status = 1')} UNION
      ${distinctIn('documents', 'changed_xid_no_html', 'book_id = $1 AND status = 1')} UNION
      ${distinctIn('document_removals', 'removed_xid', 'book_id = $1')}) u
    ORDER BY x LIMIT ${VISIBLE_MAX + 1}) v`;

interface ChangeStateRow {
  change_epoch: string;
  snapshot: string;
  in_recovery: boolean;
  now_s: number;
  token_floor: string;
  database_id: string;
  timeline: number;
}

/**
 * Run it in one REPEATABLE READ transaction, the export's snapshot: two statements when it must list
 * the visible writers (on a standby, or behind a long running list), else one, which reads no
 * document. Throws when the book is not there or the schema is behind 0007.
 */
export async function readChangeState(
  run: (text: string, params: string[]) => Promise<readonly unknown[]>,
  bookId: string,
): Promise<ChangeState> {
  const [row] = (await run(CHANGE_STATE_QUERY, [bookId])) as readonly ChangeStateRow[];
  if (!row) throw new Error(`no change state for book ${JSON.stringify(bookId)}: is the schema migrated to 0007?`);
  const running = row.snapshot.split(':')[2]!;
  let visible: bigint[] | null = null;
  if (row.in_recovery || (running !== '' && running.split(',').length > XIP_LISTED_MAX)) {
    const [v] = (await run(VISIBLE_QUERY, [bookId, row.snapshot])) as readonly { visible: string }[];
    visible = v!.visible === '' ? [] : v!.visible.split(',').map(BigInt);
  }
  return {
    bookId,
    changeEpoch: row.change_epoch,
    snapshot: row.snapshot,
    inRecovery: row.in_recovery,
    nowS: row.now_s,
    tokenFloor: row.token_floor,
    databaseId: row.database_id,
    timeline: row.timeline,
    visible,
  };
}
