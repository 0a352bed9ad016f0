/**
 * How many rows the next FETCH asks for, decided from the rows' sizes before they are fetched
 * (decisions.md D8.4), so a batch's memory is bounded in bytes whatever the documents' sizes.
 */

/** Bytes a row costs beyond its variable-length columns: the fixed columns, JSON keys and quoting. */
export const ROW_OVERHEAD_BYTES = 512;

/**
 * The number of rows, taken in order from `sizes[from…]`, whose sizes (plus ROW_OVERHEAD_BYTES
 * each) fit `budgetBytes`: at most `maxRows`, at least 1 while any row is left, so a row larger
 * than the whole budget is fetched alone. 0 when no size is left.
 */
export function rowsWithinBudget(sizes: readonly number[], from: number, budgetBytes: number, maxRows: number): number {
  let n = 0;
  let bytes = 0;
  for (let i = from; i < sizes.length && n < maxRows; i++) {
    bytes += sizes[i]! + ROW_OVERHEAD_BYTES;
    if (n > 0 && bytes > budgetBytes) break;
    n++;
  }
  return n;
}
