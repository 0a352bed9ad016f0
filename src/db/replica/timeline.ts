/**
 * The WAL timeline a server's data is read on, as an SQL expression: the one a primary writes, or the
 * highest one a hot standby is known to receive or replay. A promotion starts a new timeline, so
 * data read on different timelines may be of different histories (D12.8). A standby's
 * received timeline is readable with pg_read_all_stats (or as superuser); without it, the timeline of
 * its last restartpoint or minimum recovery point, which may lag behind a switch for a while.
 */
export const TIMELINE_SQL = `CASE WHEN pg_is_in_recovery()
    THEN greatest((SELECT received_tli FROM pg_stat_wal_receiver), (SELECT min_recovery_end_timeline FROM pg_control_recovery()),
                  (SELECT timeline_id FROM pg_control_checkpoint()))
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`;
