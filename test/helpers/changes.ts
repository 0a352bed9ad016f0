/**
 * Exports and deltas read the way the server reads them (one REPEATABLE READ READ ONLY snapshot,
 * the export's and the delta's SQL, raw rows), and a delta applied the way a client applies it.
 */
import type { Sql } from '../../src/db/connect.js';
import { changedDocumentQuery, removedQuery } from '../../src/export/snapshot/changes-query.js';
import { DOC, documentIdOf, type DocumentRow } from '../../src/export/snapshot/rows.js';
import { documentQuery, type DocumentQueryOptions } from '../../src/export/snapshot/query.js';

/** A document row as text: each column's JSON text (or stored cover URL), null as null. */
type RowText = (string | null)[];

export interface ExportRead {
  /** pg_current_snapshot() of the export's transaction. */
  snapshot: string;
  /** The export transaction's now(). */
  at: Date;
  /** id → row, in export order. */
  rows: Map<string, RowText>;
}

export interface DeltaRead {
  /** Changed or entering documents' ids, in the order the delta gives them. */
  documents: string[];
  removed: string[];
  rows: Map<string, RowText>;
}

const text = (r: DocumentRow): RowText => r.map((c) => (c === null ? null : c.toString()));
const REPEATABLE_READ = 'ISOLATION LEVEL REPEATABLE READ READ ONLY';

/** The full export of `bookId` with `opts`, and the snapshot it was read from. */
export async function exportAt(sql: Sql, bookId: string, opts: DocumentQueryOptions): Promise<ExportRead> {
  return sql.begin(REPEATABLE_READ, async (tx) => {
    const [s] = await tx<{ snapshot: string; at: Date }[]>`SELECT pg_current_snapshot()::text AS snapshot, now() AS at`;
    const rows = (await tx.unsafe(documentQuery(opts), [bookId]).raw()) as unknown as DocumentRow[];
    return { snapshot: s!.snapshot, at: s!.at, rows: new Map(rows.map((r) => [documentIdOf(r), text(r)])) };
  });
}

/** The delta of `bookId` since snapshot `since`, read in a new snapshot. */
export async function deltaSince(
  sql: Sql,
  bookId: string,
  since: string,
  opts: DocumentQueryOptions,
): Promise<DeltaRead> {
  return sql.begin(REPEATABLE_READ, async (tx) => {
    const rows = (await tx.unsafe(changedDocumentQuery(opts), [bookId, since, '{}']).raw()) as unknown as DocumentRow[];
    const removed = (await tx.unsafe(removedQuery(opts), [bookId, since, '{}']).raw()) as unknown as [Buffer][];
    return {
      documents: rows.map(documentIdOf),
      removed: removed.map((r) => JSON.parse(r[0].toString()) as string),
      rows: new Map(rows.map((r) => [documentIdOf(r), text(r)])),
    };
  });
}

/** The order key of a row: its head and tail (or, without a cover, its head alone) hold the document's fields as JSON. */
function orderKey(r: RowText): Buffer {
  const fields = r[DOC.tail] === null ? r[DOC.head] : `${r[DOC.head]}null${r[DOC.tail]}`;
  return Buffer.from((JSON.parse(`${fields}null}`) as { orderKey: string }).orderKey);
}

/**
 * `before` with the delta applied as a client applies it: removed ids deleted, changed documents
 * replacing or joining by id; then in export order (order key, then id, byte-wise: decisions.md D1).
 */
export function applyDelta(before: Map<string, RowText>, delta: DeltaRead): Map<string, RowText> {
  const out = new Map(before);
  for (const id of delta.removed) out.delete(id);
  for (const [id, row] of delta.rows) out.set(id, row);
  const sorted = [...out].sort(
    ([a, ra], [b, rb]) => Buffer.compare(orderKey(ra), orderKey(rb)) || Buffer.compare(Buffer.from(a), Buffer.from(b)),
  );
  return new Map(sorted);
}

/**
 * Resolves once every snapshot is taken above the change tokens' floor (sql/0006), so a token
 * issued now is honoured. The server may be shared: a write transaction older than the floor, in
 * any of its databases, holds every snapshot's xmin below it until it ends. Rejects after a minute.
 */
export async function aboveTokenFloor(sql: Sql): Promise<void> {
  const until = Date.now() + 60_000;
  for (;;) {
    const [row] = await sql<{ above: boolean }[]>`
      SELECT pg_snapshot_xmin(pg_current_snapshot()) >= (SELECT token_floor FROM change_tracking) AS above`;
    if (row!.above) return;
    if (Date.now() > until) throw new Error('a transaction older than the token floor is still running after a minute');
    await new Promise((r) => setTimeout(r, 50));
  }
}
