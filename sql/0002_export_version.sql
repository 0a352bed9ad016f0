-- Each knowledge base's export version, bumped in the same transaction as any change to what its
-- export contains (its documents, or its own row). The server keeps the bodies of small exports in
-- memory under (book, version, options) and serves one only while the version it was read at is
-- still the current one, so a cached body is byte-for-byte what a fresh snapshot would give.
ALTER TABLE books ADD COLUMN export_version bigint NOT NULL DEFAULT 0;

-- One UPDATE per statement and book, not per row: bulk loads pay once.
CREATE FUNCTION kbx_bump_export_version_from_documents() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE books SET export_version = export_version + 1
    WHERE id IN (SELECT book_id FROM kbx_new_rows);
  ELSIF TG_OP = 'DELETE' THEN
    UPDATE books SET export_version = export_version + 1
    WHERE id IN (SELECT book_id FROM kbx_old_rows);
  ELSE
    UPDATE books SET export_version = export_version + 1
    WHERE id IN (SELECT book_id FROM kbx_new_rows UNION SELECT book_id FROM kbx_old_rows);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER documents_export_version_insert AFTER INSERT ON documents
  REFERENCING NEW TABLE AS kbx_new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_bump_export_version_from_documents();
CREATE TRIGGER documents_export_version_update AFTER UPDATE ON documents
  REFERENCING OLD TABLE AS kbx_old_rows NEW TABLE AS kbx_new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_bump_export_version_from_documents();
CREATE TRIGGER documents_export_version_delete AFTER DELETE ON documents
  REFERENCING OLD TABLE AS kbx_old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_bump_export_version_from_documents();

-- TRUNCATE fires no row or transition-table triggers: every knowledge base moves on.
CREATE FUNCTION kbx_bump_all_export_versions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE books SET export_version = export_version + 1;
  RETURN NULL;
END $$;

CREATE TRIGGER documents_export_version_truncate AFTER TRUNCATE ON documents
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_bump_all_export_versions();

-- A change to the book's own row (name, description, cover, slug, owner) is a new version too,
-- unless the update already moved the version (the document triggers above do).
CREATE FUNCTION kbx_bump_export_version_of_book() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.export_version = OLD.export_version THEN
    NEW.export_version := OLD.export_version + 1;
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER books_export_version BEFORE UPDATE ON books
  FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
  EXECUTE FUNCTION kbx_bump_export_version_of_book();
