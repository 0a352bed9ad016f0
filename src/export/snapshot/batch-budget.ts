/** What a document costs a batch beyond its variable-length columns (D8.4); PostgreSQL cuts the batches (batch-query.ts). */

/** Bytes a row costs beyond its variable-length columns: the fixed columns, JSON keys and quoting. */
export const ROW_OVERHEAD_BYTES = 512;
