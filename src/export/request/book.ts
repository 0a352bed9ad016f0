/** The knowledge base a request names, looked up where its export will read (export-api.md 4.1 rule 6, D11.3). */

/** A timestamp as ISO 8601 in UTC with milliseconds (D2.3), formatted by PostgreSQL. */
export const iso = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The book object's columns (export-api.md table 2.1), as the encoder writes them. */
export interface BookRow {
  id: string;
  slug: string;
  name: string;
  description: string | null;
  cover_image: string | null;
  created_at: string;
  updated_at: string;
  /** A random UUID, new in every transaction that changes the export's data (D9.1). */
  export_version: string;
}

/** Columns in the order of export-api.md table 2.1. */
const BOOK_QUERY = `
  SELECT id, slug, name, description, cover_image, ${iso('created_at')} AS created_at, ${iso('updated_at')} AS updated_at,
         export_version::text AS export_version, (SELECT token_floor::text FROM change_tracking) AS token_floor,
         pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin
  FROM books
  WHERE owner_id = $1 AND slug = $2`;

/**
 * A book row as looked up, with the change tokens' floor (D12.3), which keeps exports
 * cached apart, and the lookup's snapshot xmin: on a standby, every transaction below it has finished
 * there, and so it has in any later snapshot there (D12.7).
 */
export interface BookLookup extends BookRow {
  token_floor: string;
  snapshot_xmin: string;
}

/** export-api.md 4.1 rule 6. A slug with a NUL, which PostgreSQL refuses in parameters, is none. */
export async function findBook(
  run: (text: string, params: string[]) => Promise<BookLookup[]>,
  userId: string,
  slug: string,
): Promise<BookLookup | undefined> {
  if (slug.includes('\0')) return undefined;
  return (await run(BOOK_QUERY, [userId, slug]))[0];
}
