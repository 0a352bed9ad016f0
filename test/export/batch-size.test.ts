/** Batch sizing of the export cursor: bounded by characters, by the row cap, and never zero. */
import t from 'tap';
import { BATCH_CHARS, nextBatchSize } from '../../src/export/export-stream.js';
import type { DocumentRow } from '../../src/export/query.js';

function rowWith(htmlBytes: number, strBytes: number): DocumentRow {
  const row = new Array(18).fill(null) as unknown as DocumentRow;
  row[16] = strBytes === 0 ? null : Buffer.alloc(strBytes, 0x78);
  row[17] = htmlBytes === 0 ? null : Buffer.alloc(htmlBytes, 0x79);
  return row;
}

t.test('small rows are fetched up to the row cap', async (t) => {
  t.equal(nextBatchSize([rowWith(100, 50), rowWith(0, 0)], BATCH_CHARS, 1000), 1000);
});

t.test('large rows shrink the batch so its text stays near the budget', async (t) => {
  const rows = [rowWith(100_000, 40_000), rowWith(60_000, 0)];
  const n = nextBatchSize(rows, 1_000_000, 1000);
  const average = (100_000 + 40_000 + 60_000 + 2 * 512) / 2;
  t.equal(n, Math.floor(1_000_000 / average));
  t.ok(n * average <= 1_000_000, 'the next batch fits the budget at this average');
});

t.test('a row larger than the whole budget is still fetched, one at a time', async (t) => {
  t.equal(nextBatchSize([rowWith(5_000_000, 0)], 1_000_000, 1000), 1);
});

t.test('an empty batch falls back to a nominal row size', async (t) => {
  t.equal(nextBatchSize([], 512 * 10, 1000), 10);
});
