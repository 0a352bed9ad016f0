-- Deltas exact for exports without contentHtml (decisions.md D12.3, "if and only if").
--
-- Why: 0006 keeps one changed_xid per document, set by a change to any exported column, so a delta
-- of an includeContentHtml=false export listed again a document whose only change was its HTML,
-- which that export does not carry.
--
-- What is kept: documents.changed_xid_no_html, the transaction id of the last change to an exported
-- column other than content_html (or of the row's insertion), set by the same triggers as
-- changed_xid and indexed like it. A delta without contentHtml reads it (src/export/snapshot/
-- changes-query.ts); a change token names which transactions' writes its snapshot saw, for both
-- columns (src/export/change-token.ts).
--
-- Rows that existed before this migration get this migration's transaction id, kept as the column's
-- stored default (no table rewrite): a token from before it lists each such document once more,
-- which the client already has; none is missed.
--
-- What it costs writers (bench/write-cost.ts): an UPDATE that changes an exported column compares
-- the columns but content_html once more and inserts into one more index (0006's updates are never
-- HOT already). An autosave still pays nothing.

DO $$
BEGIN
  EXECUTE format('ALTER TABLE documents ADD COLUMN changed_xid_no_html xid8 NOT NULL DEFAULT %L', pg_current_xact_id());
END $$;
ALTER TABLE documents ALTER COLUMN changed_xid_no_html SET DEFAULT pg_current_xact_id();

CREATE INDEX documents_changes_no_html_idx ON documents (book_id, changed_xid_no_html) WHERE status = 1;

CREATE OR REPLACE FUNCTION kbx_document_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.changed_xid := pg_current_xact_id();
  NEW.changed_xid_no_html := NEW.changed_xid;
  RETURN NEW;
END $$;

DROP TRIGGER documents_changed_xid_insert ON documents;
CREATE TRIGGER documents_changed_xid_insert BEFORE INSERT ON documents
  FOR EACH ROW WHEN (NEW.changed_xid IS DISTINCT FROM pg_current_xact_id()
                     OR NEW.changed_xid_no_html IS DISTINCT FROM pg_current_xact_id())
  EXECUTE FUNCTION kbx_document_inserted();

CREATE OR REPLACE FUNCTION kbx_keep_changed_xid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.changed_xid := OLD.changed_xid;
  NEW.changed_xid_no_html := OLD.changed_xid_no_html;
  RETURN NEW;
END $$;

DROP TRIGGER documents_changed_xid_guard ON documents;
CREATE TRIGGER documents_changed_xid_guard BEFORE UPDATE OF changed_xid, changed_xid_no_html ON documents
  FOR EACH ROW WHEN (OLD.changed_xid IS DISTINCT FROM NEW.changed_xid
                     OR OLD.changed_xid_no_html IS DISTINCT FROM NEW.changed_xid_no_html)
  EXECUTE FUNCTION kbx_keep_changed_xid();

-- 0006's function, and changed_xid_no_html when a column other than content_html changed too.
CREATE OR REPLACE FUNCTION kbx_document_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  moved  boolean := OLD.id <> NEW.id OR OLD.book_id <> NEW.book_id;
  reason text;
BEGIN
  NEW.changed_xid := pg_current_xact_id();
  IF (OLD.id, OLD.book_id, OLD.slug, OLD.name, OLD.type, OLD.parent_id, OLD.order_key, OLD.status,
      OLD.description, OLD.emoji_info, OLD.cover_url, OLD.cover_position, OLD.tags, OLD.theme_id,
      OLD.background_theme_id, OLD.body_font_size, OLD.created_at, OLD.updated_at, OLD.content_str)
     IS DISTINCT FROM
     (NEW.id, NEW.book_id, NEW.slug, NEW.name, NEW.type, NEW.parent_id, NEW.order_key, NEW.status,
      NEW.description, NEW.emoji_info, NEW.cover_url, NEW.cover_position, NEW.tags, NEW.theme_id,
      NEW.background_theme_id, NEW.body_font_size, NEW.created_at, NEW.updated_at, NEW.content_str) THEN
    NEW.changed_xid_no_html := NEW.changed_xid;
  END IF;
  IF OLD.status = 1 THEN
    IF moved THEN
      reason := 'moved';
    ELSIF NEW.status <> 1 THEN
      reason := 'inactivated';
    ELSIF OLD.type <> 'category' AND NEW.type = 'category' THEN
      reason := 'category';
    END IF;
    IF reason IS NOT NULL THEN
      INSERT INTO document_removals (book_id, document_id, removed_xid, reason, was_category)
      VALUES (OLD.book_id, OLD.id, NEW.changed_xid, reason, OLD.type = 'category');
    END IF;
  END IF;
  RETURN NEW;
END $$;
