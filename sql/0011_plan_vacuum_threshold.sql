-- A rolled-back batch of rewrite plans no longer holds a standby's replay behind a slow export
-- (decisions.md D11.5, after 0008).
--
-- Why: a batch of plans the database rolls back (its statement_timeout, DB_TIMEOUT_MS, passed
-- while the primary was overloaded or a writer held a document's row lock) leaves up to 1,000
-- dead rows in rewrite_plans. Past autovacuum's default threshold of 50 of them, autovacuum
-- vacuumed the table within a naptime, and that vacuum marked every page all-visible, those of the
-- plans written behind an export still reading too: a VISIBLE record whose horizon is newer than
-- that export's snapshot, on which a standby's replay waits until the export ends or
-- max_standby_streaming_delay cancels it. Found by test/export/housekeeping-exports.test.ts, which
-- now rolls back one of the service's own batches in the middle of its export.
--
-- Now rewrite_plans is vacuumed for its dead rows only once there are 100,000 of them besides
-- autovacuum_vacuum_scale_factor's fifth of the table: a hundred rolled-back batches, or plans
-- replaced when their documents changed (whose writers' own dead rows in documents are then
-- vacuumed too). What it costs: up to 100,000 dead plans kept a while longer, a few tens of
-- megabytes at a few hundred bytes a plan, reused once vacuumed; the freeze that transaction id
-- wraparound requires runs as before.

ALTER TABLE rewrite_plans SET (autovacuum_vacuum_threshold = 100000);
