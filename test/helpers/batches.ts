/** Batches (src/export/snapshot/rows.ts) built without a database: every document in pieces, as the cursor sends one that needs rewriting. */
import type { Batch, DocumentRow, PiecesAt } from '../../src/export/snapshot/rows.js';

/** A batch of `rows`, JSON framing (`,` between documents) unless told otherwise. */
export function batchOfRows(rows: readonly DocumentRow[], between = ',', after = ''): Batch {
  const parts: Buffer[] = [];
  const pieces: PiecesAt[] = [];
  let at = 0;
  const add = (b: Buffer) => {
    parts.push(b);
    at += b.length;
  };
  rows.forEach((row, i) => {
    if (i > 0) add(Buffer.from(between + after));
    const start = at;
    add(Buffer.from([1]));
    for (const col of row) if (col !== null) add(col);
    pieces.push({ at: start, end: at, row });
  });
  return { count: rows.length, text: Buffer.concat(parts), pieces, nextOversized: false, after: null };
}
