/**
 * The reference rows' SQL, in a module of its own: bench/server.ts runs it inside the server under
 * test, which must load nothing the shipped server does not (undici, with http-client.ts, added
 * several MB to its heap and up to twice that to its peaks, under --heap-growing-percent=100).
 */

/**
 * The exported columns of table 2.2 as stored, in export order: what the export reads, without
 * the `to_json` escaping its own cursor query asks PostgreSQL for (src/export/snapshot/query.ts).
 */
export function plainDocumentQuery(bookId: string, html: boolean): string {
  const iso = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  return `
  SELECT id, slug, name, type, parent_id, order_key, description, emoji_info, cover_url, cover_position,
         tags, theme_id, background_theme_id, body_font_size, ${iso('created_at')}, ${iso('updated_at')},
         content_str${html ? ', content_html' : ''}
  FROM documents
  WHERE book_id = '${bookId.replace(/'/g, "''")}' AND status = 1 AND type <> 'category'
  ORDER BY order_key, id`;
}
