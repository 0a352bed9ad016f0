/** Writes with backpressure, dropping stalled, slow, overdue or gone clients (D6.3, D6.4, D8.3; bench/optimisations.md). */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ClientGoneError, type GoneReason } from '../../errors.js';
import { sendQueueProbe, type SendQueueProbe } from './send-queue.js';

const WRITE_SLICE_BYTES = 64 * 1024;

export interface ResponseWriterOptions {
  /** Milliseconds (> 0): stall limit and the drain floor's window (D6.4, D8.3). */
  stallTimeoutMs: number;
  /** Bytes per second a client must accept while data waits; 0 turns the floor off (D8.3). */
  minDrainBytesPerS: number;
  /** Milliseconds from construction until the response is aborted; 0 turns the deadline off (D8.3). */
  maxDurationMs: number;
}

interface Point {
  waited: number;
  accepted: number;
}

export class ResponseWriter {
  private handed = 0;
  private reasonGone: GoneReason | null = null;
  private disposed = false;
  private readonly controller = new AbortController();
  /** Made at the first sample: a pipelined response gets its socket only when its turn comes. */
  private probe: SendQueueProbe | null = null;
  private readonly sampleMs: number;
  private deadline: NodeJS.Timeout | null = null;
  private ticker: NodeJS.Timeout | null = null;
  private settle: ((err?: Error) => void) | null = null;
  /** Waiting time of the waits that ended, ms; `waitStart` is the current wait's start, or -1. */
  private waitedMs = 0;
  private waitStart = -1;
  private sampling = false;
  private tickWaited = 0;
  /** The previous sample's raw reading; null when the next sample is a new baseline. */
  private last: Point | null = null;
  /** Counted waiting time and accepted bytes, oldest first, covering at least the last window. */
  private points: Point[] = [{ waited: 0, accepted: 0 }];
  private progressAt = 0;

  /** Takes over writing to `res`. Throws RangeError on options out of range; gone at once if the connection is. */
  constructor(
    private readonly res: ServerResponse,
    private readonly options: ResponseWriterOptions,
  ) {
    const { stallTimeoutMs, minDrainBytesPerS, maxDurationMs } = options;
    // setTimeout fires at once past 2^31 - 1 ms (~24.8 days).
    if (!(stallTimeoutMs > 0) || !(minDrainBytesPerS >= 0) || !(maxDurationMs >= 0 && maxDurationMs <= 2 ** 31 - 1)) {
      throw new RangeError(`ResponseWriter options out of range: ${JSON.stringify(options)}`);
    }
    this.sampleMs = Math.min(1000, Math.max(100, Math.round(stallTimeoutMs / 10)));
    res.once('close', () => {
      if (!res.writableFinished) this.drop('gone');
    });
    if (this.connectionLost()) {
      this.drop('gone');
      return;
    }
    if (maxDurationMs > 0) {
      this.deadline = setTimeout(() => this.drop('deadline'), maxDurationMs);
      this.deadline.unref();
    }
  }

  get bytes(): number {
    return this.handed;
  }

  get reason(): GoneReason | null {
    return this.reasonGone;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  check(): void {
    if (this.reasonGone === null && this.connectionLost()) this.drop('gone');
    if (this.reasonGone !== null) throw new ClientGoneError(this.reasonGone);
  }

  /**
   * Writes `chunk`; resolves once the response can take more. Rejects with ClientGoneError.
   * `written` is called once the socket holds no reference to `chunk` any more, never after a failure.
   */
  async write(chunk: Buffer, written?: () => void): Promise<void> {
    const slices = Math.ceil(chunk.length / WRITE_SLICE_BYTES);
    let left = slices;
    const sliceWritten =
      written &&
      ((err?: Error | null) => {
        if (err == null && --left === 0) written();
      });
    // Node counts a write as queued until all of it is out: one 8 MB write would hide a slow reader's pace.
    for (let at = 0; at < chunk.length; at += WRITE_SLICE_BYTES) {
      const slice = slices === 1 ? chunk : chunk.subarray(at, at + WRITE_SLICE_BYTES);
      await this.#write(slice, sliceWritten);
    }
    this.check();
  }

  async #write(chunk: Buffer, written: ((err?: Error | null) => void) | undefined): Promise<void> {
    this.check();
    this.handed += chunk.length;
    if (this.res.write(chunk, written)) return;
    await new Promise<void>((resolve, reject) => {
      const onDrain = () => done();
      const done = (err?: Error) => {
        this.res.removeListener('drain', onDrain);
        this.settle = null;
        this.waitedMs += performance.now() - this.waitStart;
        this.waitStart = -1;
        if (err) reject(err);
        else resolve();
      };
      this.settle = done;
      this.waitStart = performance.now();
      this.res.once('drain', onDrain);
      if (this.ticker === null && !this.disposed) {
        this.tickWaited = this.waitedMs;
        this.ticker = setInterval(() => this.sample(), this.sampleMs);
        this.ticker.unref();
      }
    });
  }

  /** Stops every timer; call when the export ended, whatever the outcome. Idempotent. */
  close(): void {
    this.disposed = true;
    this.stopTimers();
  }

  private connectionLost(): boolean {
    const { res } = this;
    if (res.destroyed) return !res.writableFinished;
    return res.socket?.destroyed === true;
  }

  private stopTimers(): void {
    if (this.deadline !== null) clearTimeout(this.deadline);
    if (this.ticker !== null) clearInterval(this.ticker);
    this.deadline = null;
    this.ticker = null;
  }

  private drop(reason: GoneReason): void {
    if (this.reasonGone !== null) return;
    this.reasonGone = reason;
    this.stopTimers();
    // No terminating chunk (D6.3); a client dropped for its pace is reset, or the kernel keeps sending at its pace.
    const socket = this.res.socket;
    if (reason !== 'gone' && socket && !socket.destroyed) socket.resetAndDestroy();
    this.res.destroy();
    const err = new ClientGoneError(reason);
    this.controller.abort(err);
    this.settle?.(err);
  }

  private waitedTotal(): number {
    return this.waitedMs + (this.waitStart < 0 ? 0 : performance.now() - this.waitStart);
  }

  private sample(): void {
    if (this.sampling) return;
    const waited = this.waitedTotal();
    const idle = this.waitStart < 0 && waited === this.tickWaited;
    this.tickWaited = waited;
    if (idle) {
      if (this.ticker !== null) clearInterval(this.ticker);
      this.ticker = null;
      this.last = null; // the next wait starts a new baseline: time between waits does not count
      return;
    }
    // Node's counters now, the kernel's later: bytes handed over meanwhile count as unaccepted (errs low, never high).
    const queued = this.res.writableLength;
    const handed = this.handed;
    const socket = this.res.socket;
    if (this.probe === null && socket) this.probe = sendQueueProbe(socket);
    this.sampling = true;
    void (this.probe?.() ?? Promise.resolve(null))
      .catch(() => null)
      .then((unacked) => {
        this.sampling = false;
        if (this.reasonGone === null && !this.disposed)
          this.record(waited, Math.max(0, handed - queued - (unacked ?? 0)));
      });
  }

  private record(waited: number, acceptedNow: number): void {
    const prev = this.last;
    // Never below an earlier reading, so a low reading followed by a true one is not counted twice.
    const accepted = Math.max(acceptedNow, prev?.accepted ?? 0);
    this.last = { waited, accepted };
    if (prev === null || waited <= prev.waited) return;
    const top = this.points[this.points.length - 1]!;
    const point = { waited: top.waited + (waited - prev.waited), accepted: top.accepted + (accepted - prev.accepted) };
    this.points.push(point);
    if (point.accepted > top.accepted) this.progressAt = point.waited;
    this.judge(point);
  }

  /** Applies the stall rule (D6.4) and the drain floor (D8.3) at the newest point. */
  private judge(now: Point): void {
    const window = this.options.stallTimeoutMs;
    if (now.waited - this.progressAt >= window) {
      this.drop('stalled');
      return;
    }
    if (now.waited < window) return;
    // The newest point at least a window back: the average is over slightly more than a window.
    let base = 0;
    while (this.points[base + 1]!.waited <= now.waited - window) base++;
    this.points.splice(0, base);
    const from = this.points[0]!;
    const floor = this.options.minDrainBytesPerS;
    if (floor > 0 && now.accepted - from.accepted < (floor * (now.waited - from.waited)) / 1000) this.drop('too-slow');
  }
}
