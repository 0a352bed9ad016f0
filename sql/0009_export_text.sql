-- Each document's fixed fields kept as the export's JSON text, so an export reads them instead of
-- building them (issue 43).
--
-- Why: building a row's JSON cost PostgreSQL more CPU than a whole COPY of the rows: a to_json per
-- column, two to_char timestamps and a chain of ||. Over a million small documents, the export's
-- query drained by COPY … TO '/dev/null' took 4.3–4.8 s with them, 1.4–1.6 s reading them stored
-- (bench/RESULTS.md). A document is written far less often than it is exported.
--
-- What is kept: export_head, `{"id":…` through `,"cover":`, and export_mid, `,"tags":…` through
-- `,"contentStr":` (export-api.md table 2.2's order, decisions.md D2). The cover (its URL is
-- rewritten by the server, D3.6), contentStr (often large: kept once, in content_str) and
-- contentHtml are not. kbx_export_head and kbx_export_mid below are the one definition of that text:
-- the trigger stores what they return, and the export (src/export/snapshot/query.ts) calls them for
-- a row whose columns are still NULL, so it exports the same bytes before, during and after the
-- backfill. A change of those bytes is a migration that replaces both functions and sets the
-- columns to NULL again (batched, then `kb-export backfill`), never a change to query.ts alone.
--
-- How it is kept: a BEFORE trigger sets both columns on INSERT, and on any UPDATE whose SET list
-- names a column they are built from, or names them (a write of its own to them is replaced by
-- what the functions return). It runs in the writer's transaction, after the change tracking's
-- triggers (0006, by name), and changes no exported column, so the export version (0003) and the
-- change tracking stay exact: both follow the columns the text is built from. Writes that bypass
-- triggers (session_replication_role = replica, ALTER TABLE … DISABLE TRIGGER) leave the text as
-- it was, as they leave the export version (0003); after such a write, set both columns to NULL
-- for the rows it touched, and the export builds them again.
--
-- Adding the columns rewrites nothing: they are nullable without a default, so existing rows read
-- NULL until `kb-export backfill` fills them, a batch of rows per transaction, resumable (it looks
-- for NULLs). What it costs: about 300 bytes a small document (bench/RESULTS.md), and the writer's
-- time measured by bench/write-cost.ts.

ALTER TABLE documents ADD COLUMN export_head text, ADD COLUMN export_mid text;

-- A column's JSON text, `null` when it is NULL or '' (D2.1).
CREATE FUNCTION kbx_json_or_null(v text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT coalesce(to_json(nullif(v, ''))::text, 'null') $$;

CREATE FUNCTION kbx_export_head(id text, slug text, name text, type text, parent_id text, order_key text,
                                description text, emoji_info text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT '{"id":' || to_json(id)::text || ',"slug":' || to_json(slug)::text || ',"name":' || to_json(name)::text
      || ',"type":' || to_json(type)::text || ',"parentId":' || kbx_json_or_null(parent_id)
      || ',"orderKey":' || to_json(order_key)::text || ',"description":' || kbx_json_or_null(description)
      || ',"emojiInfo":' || kbx_json_or_null(emoji_info) || ',"cover":'
$$;

-- bodyFontSize and the timestamps are quoted without to_json: nothing in them needs escaping
-- (0001's CHECK, to_char's digits). Timestamps are ISO 8601 in UTC with milliseconds (D2.6).
CREATE FUNCTION kbx_export_mid(tags text[], theme_id text, background_theme_id text, body_font_size text,
                               created_at timestamptz, updated_at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT ',"tags":' || CASE WHEN tags IS NULL OR cardinality(tags) = 0 THEN 'null' ELSE to_json(tags)::text END
      || ',"themeId":' || to_json(coalesce(nullif(theme_id, ''), 'default'))::text
      || ',"backgroundThemeId":' || to_json(coalesce(nullif(background_theme_id, ''), 'transparent'))::text
      || ',"bodyFontSize":"' || coalesce(body_font_size, 'default') || '"'
      || ',"createdAt":"' || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"'
      || ',"updatedAt":"' || to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"'
      || ',"contentStr":'
$$;

CREATE FUNCTION kbx_document_export_text() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.export_head := kbx_export_head(NEW.id, NEW.slug, NEW.name, NEW.type, NEW.parent_id, NEW.order_key,
                                     NEW.description, NEW.emoji_info);
  NEW.export_mid := kbx_export_mid(NEW.tags, NEW.theme_id, NEW.background_theme_id, NEW.body_font_size,
                                   NEW.created_at, NEW.updated_at);
  RETURN NEW;
END
$$;

CREATE TRIGGER documents_export_text_insert BEFORE INSERT ON documents
  FOR EACH ROW EXECUTE FUNCTION kbx_document_export_text();

CREATE TRIGGER documents_export_text_update
  BEFORE UPDATE OF id, slug, name, type, parent_id, order_key, description, emoji_info, tags, theme_id,
                   background_theme_id, body_font_size, created_at, updated_at, export_head, export_mid
  ON documents FOR EACH ROW EXECUTE FUNCTION kbx_document_export_text();
