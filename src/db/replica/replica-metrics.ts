/**
 * The standbys' use and lag in Prometheus metrics (D10.3, D11.4), read from a
 * ReplicaSet when scraped. Standbys are labelled by their index in DATABASE_REPLICA_URL, never by
 * host (D10.6).
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ReplicaSet, ReplicaState } from './replica-set.js';

const STATES: readonly ReplicaState[] = ['usable', 'lagging', 'down'];

/** Registers the replica metrics on `registry`; they read `replicas` at each scrape. */
export function registerReplicaMetrics(registry: Registry, replicas: ReplicaSet): void {
  const registers = [registry];
  new Gauge({
    name: 'kb_export_replica_lag_seconds',
    help: "Each standby's replay lag as last measured, seconds: the time since the primary first had WAL the standby has not replayed. Absent while a standby is down.",
    labelNames: ['standby'],
    registers,
    collect() {
      this.reset();
      for (const { index, lagMs } of replicas.status()) {
        if (lagMs !== null) this.set({ standby: String(index) }, lagMs / 1000);
      }
    },
  });
  new Gauge({
    name: 'kb_export_replica_state',
    help: 'Each standby by state: 1 for its state as of the last check (usable, lagging over REPLICA_MAX_LAG_MS, down), 0 for the others.',
    labelNames: ['standby', 'state'],
    registers,
    collect() {
      this.reset();
      for (const { index, state } of replicas.status()) {
        for (const s of STATES) this.set({ standby: String(index), state: s }, s === state ? 1 : 0);
      }
    },
  });
  new Counter({
    name: 'kb_export_replica_exports_total',
    help: 'Exports sent to each standby.',
    labelNames: ['standby'],
    registers,
    collect() {
      this.reset();
      replicas.picks.forEach((n, index) => this.inc({ standby: String(index) }, n));
    },
  });
  new Counter({
    name: 'kb_export_replica_fallbacks_total',
    help: 'Exports read from the primary while standbys are configured, by reason: no standby usable (lagging or down), the standby picked failed before the first byte, or it had not replayed what the change token saw.',
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset();
      for (const [reason, n] of replicas.fallbacksBy()) this.inc({ reason }, n);
    },
  });
}
