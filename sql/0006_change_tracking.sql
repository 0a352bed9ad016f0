-- Change tracking for deltas since an earlier export (decisions.md D12), decided by transaction
-- visibility, never by timestamps or sequence numbers.
--
-- Why not a timestamp or a sequence: both are drawn when a writer runs, not when it commits. A
-- writer that started before an export and commits after it carries a value older than the
-- export's, so "changed after the export" misses it for good (D12.3).
--
-- What is kept:
-- - documents.changed_xid: the top-level transaction id (xid8, 64 bits: no wraparound, never
--   frozen) of the last transaction that changed an exported column of the row, or inserted it.
--   Set by the triggers below, whatever a statement writes into it. An autosave of content_yjs or
--   content_json names no exported column and does not even evaluate them (UPDATE OF, as in 0003).
-- - document_removals: one row per document that left a book's export (deleted, made inactive,
--   moved to another book or given another id, or made a category), with the removing transaction's
--   xid8, and whether it left the export with excludeCategories=false too (reason <> 'category') or
--   with excludeCategories=true too (NOT was_category).
-- - books.change_epoch: random, new whenever a book row is inserted (whatever the INSERT says), so a
--   token names one incarnation of a book: a book deleted and loaded again, or restored, is another.
-- - change_tracking: one row; the HMAC secret of change tokens (src/export/change-token.ts), drawn
--   here so that every instance of a fleet reads the same one with no configuration, and
--   token_floor, the xid8 below which removals may have been pruned (see below).
-- - change_horizons: (time, snapshot xmin) samples taken by the pruning function, which maps
--   CHANGE_RETENTION_DAYS to a transaction id.
--
-- The delta: a token names the export's snapshot S0 (pg_current_snapshot() in its REPEATABLE READ
-- transaction). A row or removal is "since S0" iff NOT pg_visible_in_snapshot(xid, S0); candidates
-- are found through the indexes below with xid >= pg_snapshot_xmin(S0), since every xid below a
-- snapshot's xmin had finished before it was taken, and a row that is visible now with such an xid
-- was written by a transaction that committed. Exact whatever the commit order: a writer in
-- progress at S0 is in its xip list or at or above its xmax, so it is not visible in S0.
-- Deltas are queried by src/export/snapshot/changes-query.ts.
--
-- Cases, as the triggers handle them:
-- - changed, then changed back: the second change is a change (its transaction is not visible in
--   S0); the document is sent again with the value the client already had. SET name = name is no
--   change at all (IS DISTINCT FROM, as in 0003).
-- - deleted, then created again with the same id: a removal row and a new changed_xid; the delta
--   lists the document and leaves it out of `removed` (removals of ids present now are dropped).
-- - moved to another book (UPDATE of book_id) or given another id: a removal in the old book under
--   the old id ('moved'); the row is changed in its new book.
-- - made inactive, then active again: a removal, then a change; the delta lists the document only.
-- - made a category: a removal for excludeCategories=true only ('category'); the reverse is a change.
-- - a book deleted: its removals are deleted with it (a token of that book can never be honoured
--   again, its epoch is gone); the cascaded deletes of its documents record none.
-- - TRUNCATE of documents or document_removals records nothing row by row: it expires every token
--   (kbx_expire_change_tokens), and clients take a full export (410).
-- - rows that existed before this migration: changed_xid is this migration's transaction id, kept
--   as the column's stored default (no table rewrite). No token can be older than this migration
--   (the secret is created here), so they are in no delta until they change.
--
-- Pruning (kbx_prune_changes, called by every instance, one at a time): removals are deleted below
-- token_floor, which moves up to the xmin of a horizon sample older than the retention period (plus
-- an hour for clocks that disagree). A token is honoured only if token_floor <= xmin(S0): every
-- removal it needs (not visible in S0, hence xid >= xmin(S0)) is then still there. Pruning by a
-- timestamp of the removal would be wrong for the same reason as above: a long transaction's
-- removal carries its start time but commits later.
--
-- What it costs writers (bench/write-cost.ts, bench/RESULTS.md): an INSERT evaluates one WHEN on
-- the column default (no trigger call when the statement leaves changed_xid alone); an UPDATE of an
-- exported column compares the exported columns a second time (as 0003's trigger does), sets
-- changed_xid, and cannot be a HOT update (changed_xid is indexed); a removal adds a row to
-- document_removals. An autosave pays nothing.
--
-- What breaks the promise, as for 0003's export version: a BEFORE UPDATE trigger that changes an
-- exported column the statement does not name (test/db/export-version.test.ts allows only the two
-- below, which write changed_xid alone); writes that bypass triggers (session_replication_role =
-- replica, DISABLE TRIGGER); a point-in-time recovery or a failover to a standby that had not
-- received the last transactions, after which transaction ids are used a second time. After any of
-- these run SELECT kbx_expire_change_tokens(); every client then takes one full export.

ALTER TABLE books ADD COLUMN change_epoch uuid NOT NULL DEFAULT gen_random_uuid();

CREATE FUNCTION kbx_new_change_epoch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.change_epoch := gen_random_uuid();
  RETURN NEW;
END $$;

CREATE TRIGGER books_change_epoch_insert BEFORE INSERT ON books
  FOR EACH ROW EXECUTE FUNCTION kbx_new_change_epoch();

-- A constant default first, so that existing rows get this transaction's id without a rewrite of
-- the table; then the default every later INSERT gets.
DO $$
BEGIN
  EXECUTE format('ALTER TABLE documents ADD COLUMN changed_xid xid8 NOT NULL DEFAULT %L', pg_current_xact_id());
END $$;
ALTER TABLE documents ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();

-- Finds a book's changed active documents without reading the book (decisions.md D12.5).
CREATE INDEX documents_changes_idx ON documents (book_id, changed_xid) WHERE status = 1;

CREATE TABLE document_removals (
  book_id      text NOT NULL,
  document_id  text COLLATE "C" NOT NULL,
  removed_xid  xid8 NOT NULL,
  reason       text NOT NULL CHECK (reason IN ('deleted', 'inactivated', 'moved', 'category')),
  -- The document was a category when it left: it was never in an excludeCategories=true export.
  was_category boolean NOT NULL,
  CHECK (reason <> 'category' OR NOT was_category)
);
CREATE INDEX document_removals_book_idx ON document_removals (book_id, removed_xid);
CREATE INDEX document_removals_xid_idx ON document_removals (removed_xid);

CREATE TABLE change_tracking (
  singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  -- 32 bytes from two version-4 UUIDs: 244 bits from the server's strong random source.
  token_secret bytea NOT NULL CHECK (octet_length(token_secret) = 32),
  token_floor  xid8 NOT NULL
);
INSERT INTO change_tracking (token_secret, token_floor)
VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), '0');

CREATE TABLE change_horizons (
  taken_at      timestamptz NOT NULL,
  snapshot_xmin xid8 NOT NULL
);
CREATE INDEX change_horizons_taken_idx ON change_horizons (taken_at);

-- INSERT: a new row, or one restored with an old changed_xid, is changed by this transaction. The
-- WHEN spares the call when the column default already gave this transaction's id.
CREATE FUNCTION kbx_document_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.changed_xid := pg_current_xact_id();
  RETURN NEW;
END $$;

CREATE TRIGGER documents_changed_xid_insert BEFORE INSERT ON documents
  FOR EACH ROW WHEN (NEW.changed_xid IS DISTINCT FROM pg_current_xact_id())
  EXECUTE FUNCTION kbx_document_inserted();

-- An UPDATE that writes changed_xid itself keeps the stored value; it fires before the trigger
-- below (BEFORE triggers fire in name order), which sets this transaction's id if the row changed.
CREATE FUNCTION kbx_keep_changed_xid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.changed_xid := OLD.changed_xid;
  RETURN NEW;
END $$;

CREATE TRIGGER documents_changed_xid_guard BEFORE UPDATE OF changed_xid ON documents
  FOR EACH ROW WHEN (OLD.changed_xid IS DISTINCT FROM NEW.changed_xid)
  EXECUTE FUNCTION kbx_keep_changed_xid();

-- An exported column really changed: the row is changed by this transaction, and if it leaves the
-- export of its book (for either excludeCategories), the removal is recorded under its old book and id.
CREATE FUNCTION kbx_document_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  moved  boolean := OLD.id <> NEW.id OR OLD.book_id <> NEW.book_id;
  reason text;
BEGIN
  NEW.changed_xid := pg_current_xact_id();
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

-- The column lists are 0003's: the columns the export reads (src/export/snapshot/query.ts).
CREATE TRIGGER documents_changed_xid_update
  BEFORE UPDATE OF id, book_id, slug, name, type, parent_id, order_key, status, description, emoji_info,
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
  EXECUTE FUNCTION kbx_document_updated();

-- DELETE: one INSERT per statement. Rows of a book being deleted record nothing (the book row is
-- already gone when its documents are deleted by the cascade).
CREATE FUNCTION kbx_documents_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO document_removals (book_id, document_id, removed_xid, reason, was_category)
  SELECT o.book_id, o.id, pg_current_xact_id(), 'deleted', o.type = 'category'
  FROM kbx_removed_rows o
  WHERE o.status = 1 AND EXISTS (SELECT 1 FROM books b WHERE b.id = o.book_id);
  RETURN NULL;
END $$;

CREATE TRIGGER documents_removals_delete AFTER DELETE ON documents
  REFERENCING OLD TABLE AS kbx_removed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_documents_deleted();

CREATE FUNCTION kbx_book_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM document_removals WHERE book_id = OLD.id;
  RETURN NULL;
END $$;

CREATE TRIGGER books_removals_delete AFTER DELETE ON books
  FOR EACH ROW EXECUTE FUNCTION kbx_book_deleted();

-- Every token issued before the calling transaction commits is refused from then on (410): the
-- floor moves above this transaction's id, so a token is honoured only if its snapshot's xmin is
-- above it, that is, if every transaction up to this one had finished when it was taken.
CREATE FUNCTION kbx_expire_change_tokens() RETURNS void
LANGUAGE sql AS $$
  UPDATE change_tracking
  SET token_floor = greatest(token_floor, (pg_current_xact_id()::text::numeric + 1)::text::xid8);
$$;

CREATE FUNCTION kbx_expire_change_tokens_on_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM kbx_expire_change_tokens();
  RETURN NULL;
END $$;

CREATE TRIGGER documents_changes_truncate AFTER TRUNCATE ON documents
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_expire_change_tokens_on_truncate();
CREATE TRIGGER document_removals_truncate AFTER TRUNCATE ON document_removals
  FOR EACH STATEMENT EXECUTE FUNCTION kbx_expire_change_tokens_on_truncate();

-- Prunes removals that no honoured token can need; returns how many were deleted. Safe to call
-- from any number of instances at once (one runs, the others return 0 at once) and as often as
-- wanted: it samples a horizon at most every 5 minutes, and only moves the floor up.
CREATE FUNCTION kbx_prune_changes(retention interval) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  sampled  xid8;
  horizon  xid8;
  taken    timestamptz;
  floor    xid8;
  deleted  bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(7212345006) THEN
    RETURN 0;
  END IF;
  -- This statement's snapshot, then the clock: the time recorded is never before the snapshot.
  sampled := pg_snapshot_xmin(pg_current_snapshot());
  INSERT INTO change_horizons (taken_at, snapshot_xmin)
  SELECT clock_timestamp(), sampled
  WHERE NOT EXISTS (SELECT 1 FROM change_horizons WHERE taken_at > clock_timestamp() - interval '5 minutes');

  SELECT h.snapshot_xmin, h.taken_at INTO horizon, taken FROM change_horizons h
  WHERE h.taken_at <= now() - retention - interval '1 hour'
  ORDER BY h.taken_at DESC LIMIT 1;
  IF FOUND THEN
    UPDATE change_tracking SET token_floor = greatest(token_floor, horizon);
    DELETE FROM change_horizons WHERE taken_at < taken;
  END IF;
  SELECT token_floor INTO floor FROM change_tracking;
  DELETE FROM document_removals WHERE removed_xid < floor;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END $$;
