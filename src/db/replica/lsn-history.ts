/**
 * Replay lag from WAL positions (D11.4): each sample of the primary's flushed position
 * keeps the time it was first seen, and a standby that has replayed up to `R` is behind by the time
 * since the first sample past `R`. Unlike `pg_last_xact_replay_timestamp()` an idle primary shows
 * no lag and no clocks are mixed; unlike a heartbeat row it needs no table or WAL of its own. The
 * error is at most one check interval, towards less lag.
 */

/** A WAL position (`16/B374D848`) as a number of bytes. Throws on anything else. */
export function parseLsn(text: string): bigint {
  const m = /^([0-9A-F]{1,8})\/([0-9A-F]{1,8})$/i.exec(text);
  if (!m) throw new Error(`not a WAL position: ${text}`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

export interface Lag {
  ms: number;
  /**
   * False when the standby lacks WAL older than the oldest sample kept (it was behind when
   * sampling began, or fell further behind than the history reaches): `ms` is then a lower bound.
   */
  known: boolean;
}

interface Sample {
  lsn: bigint;
  /** Monotonic ms (performance.now()) when this position was first seen. */
  at: number;
}

export class LsnHistory {
  #samples: Sample[] = [];

  /** `maxSamples` bounds memory: one sample per check while the primary writes. */
  constructor(private readonly maxSamples = 4096) {}

  /** The primary's flushed position `lsn`, read at `at`. A lower one means a new primary: history restarts. */
  record(lsn: bigint, at: number): void {
    const last = this.#samples.at(-1);
    if (last !== undefined && lsn < last.lsn) this.#samples = [];
    else if (last !== undefined && lsn === last.lsn) return;
    this.#samples.push({ lsn, at });
    if (this.#samples.length > this.maxSamples) this.#samples.shift();
  }

  /** How far behind a standby that has replayed up to `replayed` is at `now`; null before any sample. */
  lag(replayed: bigint, now: number): Lag | null {
    const samples = this.#samples;
    const last = samples.at(-1);
    if (last === undefined) return null;
    if (replayed >= last.lsn) return { ms: 0, known: true };
    const i = samples.findIndex((s) => s.lsn > replayed);
    return { ms: Math.max(0, now - samples[i]!.at), known: i > 0 };
  }

  /**
   * Drops samples no standby needs: those at or below `replayed` (the slowest standby's position),
   * except the newest of them, which shows that standby's lag is known.
   */
  forget(replayed: bigint): void {
    let drop = 0;
    while (drop + 1 < this.#samples.length && this.#samples[drop + 1]!.lsn <= replayed) drop++;
    if (drop > 0) this.#samples.splice(0, drop);
  }

  get size(): number {
    return this.#samples.length;
  }
}
