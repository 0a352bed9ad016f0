-- Each document's contentStr and contentHtml kept as the export's JSON text too, so an export
-- reads them instead of escaping them (issue 43).
--
-- Why: with the fixed fields stored (0009), escaping the two bodies with to_json was most of
-- what PostgreSQL did for an export beyond a COPY of the same rows: over 20,000 generated documents
-- of 9 KB, about a quarter of its CPU without contentHtml and half with it (bench/RESULTS.md).
--
-- What is kept: export_str, contentStr's JSON text, and export_html, contentHtml's as stored
-- (the server rewrites its media URLs, D3); each NULL when its column is NULL or '' (D2.1), which
-- the export reads as it reads a row not yet filled. kbx_export_str and kbx_export_html are the one
-- definition of that text: the trigger stores what they return, and the export
-- (src/export/snapshot/query.ts) builds the same text for a NULL, so its bytes are the same before,
-- during and after the backfill.
--
-- How it is kept: as 0009's, by a trigger of its own, so a rename does not escape a body again: on
-- INSERT, and on any UPDATE whose SET list names content_str, content_html or the two columns (a
-- write of its own to them is replaced). It changes no exported column, so the export version
-- (0003) and the change tracking (0006) stay exact. Writes that bypass triggers leave the text as
-- it was (0009 says what to do after one).
--
-- Adding the columns rewrites nothing; `kb-export backfill` fills them with 0009's. What it costs:
-- the bodies' bytes once more on disk, and the writer's escaping and compressing (README, "Export
-- text").

ALTER TABLE documents ADD COLUMN export_str text, ADD COLUMN export_html text;

-- lz4 where the server has it: pglz made a save 1.15x and a bulk insert 1.8x as slow, and the
-- export's PostgreSQL CPU 1.5x (decompressing), for about a tenth less on disk (bench/RESULTS.md).
DO $$
BEGIN
  ALTER TABLE documents ALTER COLUMN export_str SET COMPRESSION lz4, ALTER COLUMN export_html SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  RAISE NOTICE 'this server has no lz4: export_str and export_html use its default compression';
END
$$;

-- contentStr's JSON text, NULL when it is NULL or '' (the export writes `null` then, D2.1).
CREATE FUNCTION kbx_export_str(content_str text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT to_json(nullif(content_str, ''))::text $$;

-- contentHtml's JSON text before the media rewrite, NULL when it is NULL or '' (D2.1).
CREATE FUNCTION kbx_export_html(content_html text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT to_json(nullif(content_html, ''))::text $$;

CREATE FUNCTION kbx_document_export_body() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.export_str := kbx_export_str(NEW.content_str);
  NEW.export_html := kbx_export_html(NEW.content_html);
  RETURN NEW;
END
$$;

CREATE TRIGGER documents_export_body_insert BEFORE INSERT ON documents
  FOR EACH ROW EXECUTE FUNCTION kbx_document_export_body();

CREATE TRIGGER documents_export_body_update
  BEFORE UPDATE OF content_str, content_html, export_str, export_html
  ON documents FOR EACH ROW EXECUTE FUNCTION kbx_document_export_body();
