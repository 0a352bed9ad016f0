/**
 * The columns of documents the export reads, each with an SQL expression that changes it (test rows
 * have no parent), and the editor formats it never reads (decisions.md D7.2). The export version
 * (sql/0003) and the change tracking (sql/0006) must follow exactly the first list.
 */
export const EXPORTED_COLUMN_CHANGES: Record<string, string> = {
  id: `id || '-x'`,
  book_id: `'b-u2'`,
  slug: `slug || '-x'`,
  name: `name || '-x'`,
  type: `'category'`,
  parent_id: `'d2'`,
  order_key: `order_key || 'x'`,
  status: `status + 1`,
  description: `'described'`,
  emoji_info: `'🙂'`,
  cover_url: `'/cover.png'`,
  cover_position: `'top'`,
  tags: `ARRAY['t']`,
  theme_id: `'dark'`,
  background_theme_id: `'paper'`,
  body_font_size: `'14'`,
  created_at: `created_at + interval '1 millisecond'`,
  updated_at: `updated_at + interval '1 millisecond'`,
  content_str: `coalesce(content_str, '') || 'x'`,
  content_html: `coalesce(content_html, '') || '<p>x</p>'`,
};

/** Stored, never exported: changing them changes no export. */
export const EDITOR_COLUMNS = ['content_json', 'content_yjs'];
