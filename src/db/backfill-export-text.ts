/**
 * `kb-export backfill`: fills the export text (sql/0009, sql/0010) of documents written before those
 * migrations, a batch of rows per transaction. Resumable: it looks for the rows still NULL, so a run
 * cut at any point loses nothing, and rows written meanwhile were filled by the trigger. Until it
 * ends the export builds what is missing itself (src/export/snapshot/query.ts), with the same bytes.
 */
import type { Sql } from './connect.js';

/** Rows per transaction: each holds their row locks only that long, against writers of the same documents. */
export const BACKFILL_BATCH_ROWS = 1000;

export interface BackfillSummary {
  rows: number;
  batches: number;
}

/**
 * Fills every document's NULL export text, `batchRows` rows per statement (its own transaction),
 * in id order; `onBatch` gets the rows filled so far. Setting a column to NULL fires the trigger
 * that computes it and its pair (sql/0009, sql/0010); no exported column changes, so no export
 * version or delta does. A body's text is NULL for an empty body too: such a row is done.
 */
export async function backfillExportText(
  sql: Sql,
  opts: { batchRows?: number; onBatch?: (rows: number) => void } = {},
): Promise<BackfillSummary> {
  const batchRows = opts.batchRows ?? BACKFILL_BATCH_ROWS;
  let after = '';
  const summary: BackfillSummary = { rows: 0, batches: 0 };
  for (;;) {
    const [batch] = await sql<{ n: number; last: string | null }[]>`
      WITH todo AS (
        SELECT id FROM documents
        WHERE id > ${after}
          AND (export_head IS NULL OR export_mid IS NULL
               OR (export_str IS NULL AND content_str <> '') OR (export_html IS NULL AND content_html <> ''))
        ORDER BY id LIMIT ${batchRows}
      ), filled AS (
        UPDATE documents d SET export_head = NULL, export_str = NULL FROM todo WHERE d.id = todo.id RETURNING d.id
      )
      SELECT (SELECT count(*) FROM filled)::int AS n, (SELECT max(id) FROM todo) AS last`;
    // None left after the last batch: every row before it was filled, by this run or by the trigger.
    if (batch!.last === null) return summary;
    after = batch!.last;
    summary.rows += batch!.n;
    summary.batches++;
    opts.onBatch?.(summary.rows);
  }
}
