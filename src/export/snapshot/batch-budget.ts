/** How many rows the next FETCH asks for, from their sizes before they are fetched (D8.4). */

/** Bytes a row costs beyond its variable-length columns: the fixed columns, JSON keys and quoting. */
export const ROW_OVERHEAD_BYTES = 512;

/** Rows from `sizes[from…]` that fit `budgetBytes`, at most `maxRows`; at least 1 while any is left. */
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
