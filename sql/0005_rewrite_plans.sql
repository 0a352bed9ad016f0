-- Rewrite plans: the media rewriter's decisions for a document's contentHtml, kept so that the next
-- export splices them in without running parse5's tokenizer again (decisions.md D3; the plan format
-- is src/export/rewrite/rewrite-plan.ts). kb-export's own table: exports only read it, inside their
-- READ ONLY snapshot; the server writes it behind them on another connection.
--
-- The key, and why it is a hash of the content rather than a row version: plan_key is SHA-256 of
-- the rules version (PLAN_RULES_VERSION), the media proxy prefix and the contentHtml JSON text the
-- plan's byte offsets refer to, computed by the server from the very bytes it is about to splice.
-- A plan is used only when that key equals the key of the row as read in the export's snapshot, so
-- it can never be applied to content it was not computed from, whatever happened in between: an
-- UPDATE, a restore from a backup, writes with triggers disabled, logical replication, a plan
-- written late by an export that read an older snapshot, or a changed prefix or rewriter. A row
-- version (xmin, a counter, a timestamp) promises none of that: xmin repeats after wraparound and
-- differs across dump and restore, and a version kept by a trigger is missed by writes that bypass
-- triggers (see 0003). What it costs: the server hashes each flagged contentHtml on every export
-- (about 2 GB/s, against 50 MB/s for the tokenizer); nothing is added to writers' transactions.
--
-- Failure modes, all of which make the export tokenize as it did before plans, never export other
-- bytes: a plan whose key does not match (the document changed, another prefix, another rules
-- version) is recomputed and replaced by the next export; a SHA-256 collision between two texts is
-- the only way to a wrong plan, and is not a practical concern. Two servers exporting the same
-- documents under different prefixes replace each other's plans (one plan per document), which
-- costs them speed only.
--
-- What keeps plans from piling up: one row per document (the primary key), replaced when its key
-- changes; removed with the document (ON DELETE CASCADE, so with its book too). A document that is
-- no longer active keeps its plan until it is deleted. TRUNCATE documents must name this table too
-- (or say CASCADE), as PostgreSQL requires for any referencing table.

CREATE TABLE rewrite_plans (
  document_id text COLLATE "C" PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
  plan_key    bytea NOT NULL CHECK (octet_length(plan_key) = 32),
  plan        bytea NOT NULL
);

-- Plans are small and rewritten in place when documents change: keep their pages packed for updates.
ALTER TABLE rewrite_plans SET (fillfactor = 90);
