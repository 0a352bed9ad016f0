/**
 * The hot standbys exports read from (DATABASE_REPLICA_URL, D11.2, D11.4): a
 * background check, one round per interval whatever the request rate, samples the primary's WAL
 * position and each standby's replay position (lsn-history.ts says why positions) and decides per
 * standby: usable, lagging (over REPLICA_MAX_LAG_MS, or by how much is unknown) or down (no
 * answer in time, or not in recovery: a promoted standby is no longer one). pick() hands out the
 * usable ones in turn, or null: read from the primary. A fallback to the primary is logged once
 * when it starts and once when it ends, and each export it sends to the primary is counted.
 * Statuses and logs name standbys by index (`replica 0`), never by host (D10.6).
 */
import { performance } from 'node:perf_hooks';
import type { Config } from '../../config.js';
import { connect, type Sql } from '../connect.js';
import { withTimeout } from '../dependency.js';
import { LsnHistory, parseLsn } from './lsn-history.js';
import { TIMELINE_SQL } from './timeline.js';

export type ReplicaState = 'usable' | 'lagging' | 'down';

/**
 * Why an export read the primary while standbys are configured: none was usable, the one picked
 * failed before the export's first byte, or it had not replayed what a change token saw (D12.7).
 */
export type FallbackReason = 'no_usable_standby' | 'standby_failed' | 'behind_token';

/** One standby's pools: `sql` for exports (what pick() returns), `checkSql` (one connection) for the check. */
export interface StandbyPools {
  sql: Sql;
  checkSql: Sql;
}

export interface ReplicaStatus {
  /** Position in DATABASE_REPLICA_URL, from 0. */
  index: number;
  state: ReplicaState;
  /** Measured replay lag, ms (a lower bound while `state` is lagging for an unknown lag); null when down or unmeasured. */
  lagMs: number | null;
  /** Why the standby is not usable, in words without hosts; '' when usable. */
  reason: string;
}

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export interface ReplicaSetOptions {
  /** A pool on the primary, where its WAL position is read (the lookup pool will do). */
  primary: Sql;
  /** Taken over: close() ends them. */
  standbys: readonly StandbyPools[];
  /** REPLICA_MAX_LAG_MS. */
  maxLagMs: number;
  /** REPLICA_CHECK_INTERVAL_MS: time between the end of one round and the start of the next. */
  intervalMs: number;
  /** Bound on each query of a round (D8.5); rounds never overlap, so it may exceed intervalMs. */
  timeoutMs: number;
  log: Log;
}

/** What pick() returns: the standby's export pool and how to name it in logs and metrics. */
export interface PickedReplica {
  sql: Sql;
  index: number;
  name: string;
}

interface Standby extends StandbyPools {
  status: ReplicaStatus;
  checked: boolean;
  /** Its state before the current round; null in the first. */
  previous: ReplicaState | null;
  /** Why the current round found it down, for the log. */
  error: unknown;
  picks: number;
  /** The previous round's query when it has not answered yet: no second one is sent meanwhile. */
  pending: Promise<unknown> | null;
}

export class ReplicaSet {
  readonly #primary: Sql;
  readonly #standbys: Standby[];
  readonly #history = new LsnHistory();
  readonly #opts: ReplicaSetOptions;
  readonly #timeoutMs: number;
  #primaryPending: Promise<unknown> | null = null;
  /** The primary's timeline as of the last round that reached it. */
  #timeline: number | null = null;
  #timer: NodeJS.Timeout | null = null;
  #running = false;
  #next = 0;
  readonly #fallbacks = new Map<FallbackReason, number>();
  /** Since when no standby is usable (performance.now()), and the exports sent to the primary since. */
  #fallback: { since: number; exports: number } | null = null;

  constructor(opts: ReplicaSetOptions) {
    this.#opts = opts;
    this.#primary = opts.primary;
    this.#timeoutMs = opts.timeoutMs;
    this.#standbys = opts.standbys.map((pools, index) => ({
      ...pools,
      // Not usable until a check says so.
      status: { index, state: 'down', lagMs: null, reason: 'not checked yet' },
      checked: false,
      previous: null,
      error: undefined,
      picks: 0,
      pending: null,
    }));
  }

  /** Runs the first round (so pick() has an answer), then one round every intervalMs until close(). */
  async start(): Promise<void> {
    if (this.#standbys.length === 0) return;
    this.#running = true;
    await this.#round();
    const tick = () => {
      void this.#round().finally(() => {
        if (this.#running) this.#timer = setTimeout(tick, this.#opts.intervalMs).unref();
      });
    };
    if (this.#running) this.#timer = setTimeout(tick, this.#opts.intervalMs).unref();
  }

  /** Stops the checks and ends the standbys' pools (not the primary's). */
  async close(): Promise<void> {
    this.#running = false;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await Promise.allSettled(
      this.#standbys.flatMap((s) => [s.sql.end({ timeout: 5 }), s.checkSql.end({ timeout: 5 })]),
    );
  }

  /**
   * The next usable standby in turn, or null: read from the primary. A null while standbys are
   * configured counts as a fallback.
   */
  pick(): PickedReplica | null {
    const n = this.#standbys.length;
    for (let k = 0; k < n; k++) {
      const s = this.#standbys[(this.#next + k) % n]!;
      if (s.status.state !== 'usable') continue;
      this.#next = (s.status.index + 1) % n;
      s.picks++;
      return { sql: s.sql, index: s.status.index, name: `replica ${s.status.index}` };
    }
    if (n > 0) {
      this.fellBack('no_usable_standby');
      if (this.#fallback) this.#fallback.exports++;
    }
    return null;
  }

  /** Counts an export sent to the primary for `reason` (pick() counts its own). */
  fellBack(reason: FallbackReason): void {
    this.#fallbacks.set(reason, (this.#fallbacks.get(reason) ?? 0) + 1);
  }

  /** Each standby's state as of the last round, in DATABASE_REPLICA_URL's order. */
  status(): ReplicaStatus[] {
    return this.#standbys.map((s) => ({ ...s.status }));
  }

  /** Exports sent to the primary since start, whatever the reason. */
  get fallbacks(): number {
    let n = 0;
    for (const count of this.#fallbacks.values()) n += count;
    return n;
  }

  /** Exports sent to the primary since start, by reason. */
  fallbacksBy(): ReadonlyMap<FallbackReason, number> {
    return this.#fallbacks;
  }

  /** Exports pick() sent to each standby, by index. */
  get picks(): number[] {
    return this.#standbys.map((s) => s.picks);
  }

  async #round(): Promise<void> {
    try {
      const [row] = await this.#ask('primary', this.#primary, (sql) =>
        sql.unsafe<{ lsn: string; timeline: number }[]>(
          `SELECT pg_current_wal_flush_lsn()::text AS lsn, ${TIMELINE_SQL} AS timeline`,
        ),
      );
      this.#history.record(parseLsn(row!.lsn), performance.now());
      this.#timeline = row!.timeline;
    } catch {
      // Lag is then measured against the primary's last known position; /readyz reports the primary.
    }
    const replayed = await Promise.all(this.#standbys.map((s) => this.#check(s)));
    const known = replayed.filter((r): r is bigint => r !== null);
    if (known.length > 0) this.#history.forget(known.reduce((a, b) => (b < a ? b : a)));
    this.#report();
  }

  /** Checks one standby and sets its status; returns its replay position, or null when down. */
  async #check(s: Standby): Promise<bigint | null> {
    s.previous = s.checked ? s.status.state : null;
    s.checked = true;
    s.error = undefined;
    const set = (state: ReplicaState, lagMs: number | null, reason: string) => {
      s.status = { index: s.status.index, state, lagMs: lagMs === null ? null : Math.round(lagMs), reason };
    };
    let row: { recovery: boolean; replayed: string | null; timeline: number };
    try {
      const rows = await this.#ask(s, s.checkSql, (sql) =>
        sql.unsafe<{ recovery: boolean; replayed: string | null; timeline: number }[]>(
          `SELECT pg_is_in_recovery() AS recovery, pg_last_wal_replay_lsn()::text AS replayed, ${TIMELINE_SQL} AS timeline`,
        ),
      );
      row = rows[0]!;
    } catch (err) {
      s.error = err;
      set('down', null, 'no answer');
      return null;
    }
    // Only a server started without recovery has no replay position.
    if (!row.recovery || row.replayed === null) {
      set('down', null, 'not in recovery (promoted?)');
      return null;
    }
    const replayed = parseLsn(row.replayed);
    const lag = this.#history.lag(replayed, performance.now());
    // Its change tokens would name its timeline, which the primary no longer answers (D12.8).
    if (this.#timeline !== null && row.timeline !== this.#timeline)
      set('lagging', null, `on timeline ${row.timeline}, the primary on ${this.#timeline}`);
    else if (lag === null) set('lagging', null, "the primary's WAL position is unknown");
    else if (!lag.known) set('lagging', lag.ms, 'behind by more than its history reaches');
    else if (lag.ms > this.#opts.maxLagMs) set('lagging', lag.ms, `lag over ${this.#opts.maxLagMs} ms`);
    else set('usable', lag.ms, '');
    return replayed;
  }

  /**
   * Logs a fallback to the primary when it starts and when it ends, and any other change of a
   * standby's state, once each (a standby first checked counts as changed when it is not usable).
   */
  #report(): void {
    // A round that ends after close() saw its pools end, not the standbys fail.
    if (!this.#running) return;
    const log = this.#opts.log;
    const usable = this.#standbys.some((s) => s.status.state === 'usable');
    const replicas = () =>
      this.#standbys.map(({ status, error }) => ({ ...status, ...(error === undefined ? {} : { err: error }) }));
    if (!usable && this.#fallback === null) {
      this.#fallback = { since: performance.now(), exports: 0 };
      log.warn({ replicas: replicas() }, 'replica unavailable: exports read from the primary until one is back');
      return;
    }
    if (usable && this.#fallback !== null) {
      const { since, exports } = this.#fallback;
      this.#fallback = null;
      log.info(
        { replicas: replicas(), ms: Math.round(performance.now() - since), exports },
        'replica available again: exports read from replicas',
      );
      return;
    }
    for (const s of this.#standbys) {
      const { index, state, lagMs, reason } = s.status;
      if (state === (s.previous ?? 'usable')) continue;
      if (state === 'usable') log.info({ replica: index, lagMs }, `replica ${index} usable again`);
      else
        log.warn(
          { replica: index, state, lagMs, reason, ...(s.error === undefined ? {} : { err: s.error }) },
          `replica ${index} ${state}: ${reason}`,
        );
    }
  }

  /** Runs `query` on `sql` within the timeout, unless the previous one for `key` is still waiting. */
  async #ask<T>(key: Standby | 'primary', sql: Sql, query: (sql: Sql) => Promise<T>): Promise<T> {
    const pending = key === 'primary' ? this.#primaryPending : key.pending;
    if (pending !== null) throw new Error('the previous check has not answered yet');
    const work = query(sql);
    const settle = () => {
      if (key === 'primary') this.#primaryPending = null;
      else key.pending = null;
    };
    if (key === 'primary') this.#primaryPending = work;
    else key.pending = work;
    work.then(settle, settle);
    return withTimeout(work, this.#timeoutMs, 'database', 'replica check');
  }
}

/**
 * The standbys of `config.databaseReplicaUrls`, checked against `primary`, each with one connection
 * for the check and one pool for its exports and their book lookups: EXPORT_CONCURRENCY + DB_POOL_SIZE
 * connections, so lookups always find one free whatever the exports hold (admission lets at most
 * EXPORT_CONCURRENCY of them run). Not started: call start().
 */
export function openReplicaSet(
  config: Pick<
    Config,
    | 'databaseReplicaUrls'
    | 'replicaMaxLagMs'
    | 'replicaCheckIntervalMs'
    | 'dbTimeoutMs'
    | 'exportConcurrency'
    | 'poolSize'
  >,
  primary: Sql,
  log: Log,
): ReplicaSet {
  const connectTimeoutS = Math.max(1, Math.ceil(config.dbTimeoutMs / 1000));
  const standbys = config.databaseReplicaUrls.map((url) => ({
    sql: connect(url, {
      max: config.exportConcurrency + config.poolSize,
      applicationName: 'kb-export-export',
      connectTimeoutS,
      fetchTypes: false,
    }),
    checkSql: connect(url, {
      max: 1,
      applicationName: 'kb-export-replica-check',
      connectTimeoutS,
      statementTimeoutMs: config.dbTimeoutMs,
      fetchTypes: false,
    }),
  }));
  return new ReplicaSet({
    primary,
    standbys,
    maxLagMs: config.replicaMaxLagMs,
    intervalMs: config.replicaCheckIntervalMs,
    timeoutMs: config.dbTimeoutMs,
    log,
  });
}
