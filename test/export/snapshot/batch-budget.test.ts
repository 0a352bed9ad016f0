/** rowsWithinBudget: batches bounded in bytes before they are fetched (decisions.md D8.4). */
import fc from 'fast-check';
import t from 'tap';
import { ROW_OVERHEAD_BYTES, rowsWithinBudget } from '../../../src/export/snapshot/batch-budget.js';

const cost = (sizes: number[], from: number, n: number) =>
  sizes.slice(from, from + n).reduce((a, s) => a + s + ROW_OVERHEAD_BYTES, 0);

t.test('small rows are taken up to the row cap', async (t) => {
  t.equal(rowsWithinBudget(Array(5000).fill(100), 0, 2 * 1024 * 1024, 1000), 1000);
});

t.test('large rows stop the batch at the budget', async (t) => {
  const sizes = [100, 100, 400_000, 400_000, 400_000, 100];
  const n = rowsWithinBudget(sizes, 0, 1_000_000, 1000);
  t.equal(n, 4);
  t.ok(cost(sizes, 0, n) <= 1_000_000);
  t.ok(cost(sizes, 0, n + 1) > 1_000_000, 'one more row would not fit');
});

t.test('a row larger than the whole budget comes alone', async (t) => {
  t.equal(rowsWithinBudget([8_000_000, 10], 0, 1_000_000, 1000), 1);
  t.equal(rowsWithinBudget([10, 8_000_000], 0, 1_000_000, 1000), 1, 'and does not join a batch that has room left');
});

t.test('no rows left: 0', async (t) => {
  t.equal(rowsWithinBudget([1, 2, 3], 3, 1000, 10), 0);
  t.equal(rowsWithinBudget([], 0, 1000, 10), 0);
});

t.test('property: a batch fits the budget unless it is one row, and never stops early', async (t) => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 10_000_000 }), { minLength: 1, maxLength: 200 }),
      fc.integer({ min: 1, max: 5_000_000 }),
      fc.integer({ min: 1, max: 100 }),
      (sizes, budget, maxRows) => {
        let from = 0;
        while (from < sizes.length) {
          const n = rowsWithinBudget(sizes, from, budget, maxRows);
          if (n < 1 || n > maxRows) return false;
          if (n > 1 && cost(sizes, from, n) > budget) return false;
          const stoppedEarly = n < maxRows && from + n < sizes.length && cost(sizes, from, n + 1) <= budget;
          if (stoppedEarly) return false;
          from += n;
        }
        return true;
      },
    ),
  );
  t.pass('held for every generated case');
});
