-- Plan writes without a foreign key: a cold export of a million small documents spent about half of
-- PostgreSQL's CPU for its plans (7 of 13 µs a plan) in the foreign key's check, a query per row
-- that locks the document's row FOR KEY SHARE, writing its page and a WAL record for each plan
-- (bench/optimisations.md, eleventh round). The plan writer's INSERT already skips plans of
-- documents that no longer exist (src/export/rewrite/plans/plan-store.ts).
--
-- What the foreign key did is done here instead: a plan goes with its document, deleted on its own
-- or with its book, moved to another id, or truncated. One case the lock closed stays open: a
-- document deleted while a plan of it is being written, after that INSERT's snapshot, leaves the
-- plan behind. Such a plan is never used for other content (its key is the hash of the text it was
-- made for, 0005), costs a row, and is replaced by the plan of a new document with the same id.
-- TRUNCATE documents no longer has to name rewrite_plans.

ALTER TABLE rewrite_plans DROP CONSTRAINT rewrite_plans_document_id_fkey;

CREATE FUNCTION kbx_drop_plans_of_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM rewrite_plans WHERE document_id IN (SELECT id FROM kbx_old_rows);
  RETURN NULL;
END $$;

CREATE TRIGGER documents_plans_delete AFTER DELETE ON documents
  REFERENCING OLD TABLE AS kbx_old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_drop_plans_of_deleted();

-- A row trigger: PostgreSQL allows no transition tables on a trigger with a column list, and ids rarely change.
CREATE FUNCTION kbx_drop_plan_of_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM rewrite_plans WHERE document_id = OLD.id;
  RETURN NULL;
END $$;

CREATE TRIGGER documents_plans_id_update AFTER UPDATE OF id ON documents
  FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
  EXECUTE FUNCTION kbx_drop_plan_of_moved();

-- `TRUNCATE documents, rewrite_plans` has the table in use by the very statement: then it is empty.
CREATE FUNCTION kbx_drop_plans_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE rewrite_plans;
  RETURN NULL;
EXCEPTION WHEN object_in_use THEN
  DELETE FROM rewrite_plans;
  RETURN NULL;
END $$;

CREATE TRIGGER documents_plans_truncate AFTER TRUNCATE ON documents
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_drop_plans_on_truncate();
