-- Fewer of kb-export's own writes that cancel exports on a hot standby (decisions.md D11.5).
--
-- Why: a row version deleted or replaced on the primary is removed later, by pruning when a page
-- is read or by vacuum, and that cleanup's WAL record carries the newest transaction it removed
-- (snapshotConflictHorizon). A standby replaying it cancels, after max_standby_streaming_delay,
-- every query whose snapshot began before that transaction: a slow reader's export, hours long,
-- meets every such record of its hours. Marking a page all-visible does the same for the newest
-- row inserted on it. Measured in the primary's WAL by bench/standby-housekeeping.ts.
--
-- 1. kbx_prune_changes (0006) wrote whenever one of the instances called it (every 10 minutes
--    each): it updated change_tracking even when the floor did not move, and deleted a horizon
--    sample and the removals below the floor each time a sample aged past the retention. Its next
--    call read the same pages again, the rows it had deleted still on them, and pruned them: about
--    two records an hour whose horizon was 10 minutes old. Now the floor moves only by an hour's
--    samples or more (change_tracking.floor_taken_at: the time of the sample it last moved to),
--    one UPDATE an hour; and the samples more than a day older than it, and the removals below it,
--    are deleted once a day, when the floor moves into another day. Those rows' pages are then
--    read again, and pruned, by the next day's DELETEs, a day later: no export that began before
--    them can still run (EXPORT_MAX_DURATION_MS is an hour by default). What it costs: a token up
--    to an hour older than the retention plus an hour may still be honoured (its removals are all
--    there, so its delta is right), and removals below the floor wait up to a day to be deleted
--    (nothing reads them: a token below the floor is refused). The floor still only moves up, and
--    a call with nothing to do writes nothing but a sample every 5 minutes.
--
-- 2. rewrite_plans: a cold export writes its documents' plans behind itself, and once 1,000 of
--    them (and a fifth of the table) were inserted, autovacuum marked their pages all-visible and
--    autoanalyze rewrote the table's pg_statistic rows while the export still read, both with a
--    horizon newer than its snapshot: a cold export from a standby was cancelled by its own plans.
--    Neither is of use here. Plans are read by their primary key, one row at a time, and always
--    from the heap (the plan is not in the index), so no plan choice depends on the table's
--    statistics and no index-only scan on its visibility map. Vacuum still runs for dead rows
--    (plans replaced when documents change), and for the freeze that transaction id wraparound
--    requires.

ALTER TABLE change_tracking ADD COLUMN floor_taken_at timestamptz;

CREATE OR REPLACE FUNCTION kbx_prune_changes(retention interval) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  sampled  xid8;
  horizon  xid8;
  taken    timestamptz;
  floor    xid8;
  last     timestamptz;
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
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  SELECT c.token_floor, c.floor_taken_at INTO floor, last FROM change_tracking c;
  IF horizon <= floor OR taken < last + interval '1 hour' THEN
    RETURN 0;
  END IF;
  -- Re-checked on the row as committed: tokens expired meanwhile (kbx_expire_change_tokens) stay so.
  UPDATE change_tracking SET token_floor = horizon, floor_taken_at = taken WHERE token_floor < horizon;
  IF date_trunc('day', taken) = date_trunc('day', last) THEN
    RETURN 0;
  END IF;
  -- A day behind the one in use: the samples next to it share the pages every call reads, and
  -- would be pruned there minutes after they were deleted.
  DELETE FROM change_horizons WHERE taken_at < taken - interval '1 day';
  SELECT c.token_floor INTO floor FROM change_tracking c;
  DELETE FROM document_removals WHERE removed_xid < floor;
  GET DIAGNOSTICS deleted = ROW_COUNT;
  RETURN deleted;
END $$;

ALTER TABLE rewrite_plans SET (autovacuum_vacuum_insert_threshold = -1, autovacuum_analyze_threshold = 2147483647);
