-- Export versions that never repeat, paid for only by changes the export can see (decisions.md D9.1).
--
-- Why: 0002 counted from 0 per book. Delete a book and load it again with the same id, restore a
-- backup, or fail over to a lagging replica, and the same numbers come back for other data, so a
-- body kept under (book, version) is served stale. And its UPDATE trigger bumped the book on every
-- document write, editor autosaves of content_yjs/content_json included, so every write in a book
-- queued on that one row lock of books.
--
-- The promise: equal versions mean byte-identical export data for the book, and any change to the
-- book row or to an exported column of one of its documents gives a version never seen before.
--
-- How it is kept: a transaction that changes what a book exports gives the book a random version
-- (kbx_export_version below: 128 bits derived from a gen_random_uuid() drawn once per transaction,
-- and the book id, so one transaction's books differ too). Random values do not repeat, where a
-- counter does as soon as its history is lost. A database restored from a backup, or a replica that
-- lagged, brings an old version back only together with the very rows it was assigned with (the
-- version is data in the same snapshot as the documents), so a body kept under that version is
-- still exactly what a fresh export gives; the next change draws a new value, never a continuation
-- of an old sequence. A pg_dump restore likewise brings versions and rows from one snapshot. A book
-- row INSERTed always gets a new version, whatever the INSERT says, so a book re-created from parts
-- (its row from a backup, its documents loaded again) cannot reuse one.
--
-- What it costs writers (bench/write-cost.ts, bench/RESULTS.md): a book is updated at most once per
-- transaction, and only when an exported column really changes (compared with IS DISTINCT FROM, so
-- SET name = name changes nothing). The documents' UPDATE trigger is row-level and names the
-- exported columns (UPDATE OF): an UPDATE whose SET list names none of them (an editor autosave of
-- content_yjs/content_json) does not even evaluate it, takes no lock on books and never compares
-- content_html, which for a large document costs milliseconds (TOAST decompression). A statement-
-- level trigger cannot have a column list, so it would compare every updated row's content.
-- A column added to the export query (src/export/query.ts) must be added to these lists.
--
-- What breaks the promise (the export then serves a stale body until the next real change):
-- - a BEFORE UPDATE trigger on documents that changes an exported column the UPDATE does not name:
--   PostgreSQL fires UPDATE OF triggers by the SET list only. test/db/export-version.test.ts fails
--   when documents gets a BEFORE UPDATE trigger.
-- - writes that bypass triggers: session_replication_role = replica (pg_restore --disable-triggers,
--   logical replication applying documents into a database whose books are not replicated with
--   them), ALTER TABLE … DISABLE TRIGGER. After such a write run
--   UPDATE books SET export_version = gen_random_uuid() for the books it touched.
-- - a direct UPDATE of export_version to anything but a fresh random value, e.g. one copied from
--   another book or database.

ALTER TABLE books
  ALTER COLUMN export_version DROP DEFAULT,
  ALTER COLUMN export_version TYPE uuid USING gen_random_uuid(),
  ALTER COLUMN export_version SET DEFAULT gen_random_uuid();

-- The version the current transaction gives book `book_id`: the same value for every change to the
-- book within one transaction (so the book row is updated once, not once per statement or row), a
-- new random one in any other transaction. The token is transaction-local and carries its
-- transaction's id, so a value left by a session-level SET is never taken for this transaction's.
CREATE FUNCTION kbx_export_version(book_id text) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  xact  text := pg_current_xact_id()::text;
  token text := current_setting('kbx.export_version_token', true);
BEGIN
  IF token IS NULL OR split_part(token, '/', 1) <> xact THEN
    token := xact || '/' || gen_random_uuid()::text;
    PERFORM set_config('kbx.export_version_token', token, true);
  END IF;
  RETURN left(encode(sha256(convert_to(token || '/' || book_id, 'UTF8')), 'hex'), 32)::uuid;
END $$;

-- Inserts and deletes: one UPDATE of books per statement, so a bulk load pays once per book.
CREATE OR REPLACE FUNCTION kbx_bump_export_version_from_documents() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE books SET export_version = kbx_export_version(id)
    WHERE id IN (SELECT book_id FROM kbx_new_rows) AND export_version <> kbx_export_version(id);
  ELSE
    UPDATE books SET export_version = kbx_export_version(id)
    WHERE id IN (SELECT book_id FROM kbx_old_rows) AND export_version <> kbx_export_version(id);
  END IF;
  RETURN NULL;
END $$;

-- Updates: per changed row, a no-op once the book has this transaction's version, so a statement
-- changing many documents of a book still writes the book row once.
CREATE FUNCTION kbx_bump_export_version_from_document_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v uuid := kbx_export_version(NEW.book_id);
BEGIN
  UPDATE books SET export_version = v WHERE id = NEW.book_id AND export_version <> v;
  IF OLD.book_id <> NEW.book_id THEN
    v := kbx_export_version(OLD.book_id);
    UPDATE books SET export_version = v WHERE id = OLD.book_id AND export_version <> v;
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER documents_export_version_update ON documents;
CREATE TRIGGER documents_export_version_update
  AFTER UPDATE OF id, book_id, slug, name, type, parent_id, order_key, status, description, emoji_info,
                  cover_url, cover_position, tags, theme_id, background_theme_id, body_font_size,
                  created_at, updated_at, content_str, content_html
  ON documents
  FOR EACH ROW WHEN ((OLD.id, OLD.book_id, OLD.slug, OLD.name, OLD.type, OLD.parent_id, OLD.order_key,
                      OLD.status, OLD.description, OLD.emoji_info, OLD.cover_url, OLD.cover_position,
                      OLD.tags, OLD.theme_id, OLD.background_theme_id, OLD.body_font_size,
                      OLD.created_at, OLD.updated_at, OLD.content_str, OLD.content_html)
                     IS DISTINCT FROM
                     (NEW.id, NEW.book_id, NEW.slug, NEW.name, NEW.type, NEW.parent_id, NEW.order_key,
                      NEW.status, NEW.description, NEW.emoji_info, NEW.cover_url, NEW.cover_position,
                      NEW.tags, NEW.theme_id, NEW.background_theme_id, NEW.body_font_size,
                      NEW.created_at, NEW.updated_at, NEW.content_str, NEW.content_html))
  EXECUTE FUNCTION kbx_bump_export_version_from_document_update();

-- TRUNCATE fires no row or transition-table triggers: every knowledge base moves on.
CREATE OR REPLACE FUNCTION kbx_bump_all_export_versions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE books SET export_version = kbx_export_version(id) WHERE export_version <> kbx_export_version(id);
  RETURN NULL;
END $$;

-- The book's own row: inserted, or changed in a column the export reads (the lookup's owner_id and
-- slug, the fields of export-api.md table 2.1), it gets this transaction's version whatever the
-- statement set, so no statement can pair changed data with a version chosen by hand. The document
-- triggers' UPDATE of books changes none of these columns and so does not fire it.
CREATE OR REPLACE FUNCTION kbx_bump_export_version_of_book() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.export_version := kbx_export_version(NEW.id);
  RETURN NEW;
END $$;

DROP TRIGGER books_export_version ON books;
CREATE TRIGGER books_export_version BEFORE UPDATE ON books
  FOR EACH ROW WHEN ((OLD.id, OLD.owner_id, OLD.slug, OLD.name, OLD.description, OLD.cover_image,
                      OLD.created_at, OLD.updated_at)
                     IS DISTINCT FROM
                     (NEW.id, NEW.owner_id, NEW.slug, NEW.name, NEW.description, NEW.cover_image,
                      NEW.created_at, NEW.updated_at))
  EXECUTE FUNCTION kbx_bump_export_version_of_book();

CREATE TRIGGER books_export_version_insert BEFORE INSERT ON books
  FOR EACH ROW EXECUTE FUNCTION kbx_bump_export_version_of_book();
