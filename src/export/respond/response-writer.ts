/**
 * Writes an export to its HTTP response with backpressure, and drops clients that would hold a
 * snapshot open for too long (decisions.md D6.3, D6.4, D8.3):
 * - stalled: the client accepted nothing for `stallTimeoutMs` of time during which data was waiting;
 * - too slow: over the last `stallTimeoutMs` of such waiting time it accepted fewer than
 *   `minDrainBytesPerS` per second (checked once that much waiting time has passed);
 * - deadline: `maxDurationMs` after the writer was made, whatever the export is waiting on;
 * - gone: the connection closed (also before the writer was made).
 * Dropping destroys the response, so a chunked body never gets its terminating chunk (D6.3), and ends
 * any pending write with ClientGoneError, whose `reason` says which rule applied.
 *
 * "Accepted" is what left the server: bytes handed to res.write minus what is still queued, in Node
 * (res.writableLength, which is res.outputSize plus the socket's writableLength, the libuv queue
 * included; socket.bufferSize is the same count) and in the kernel unacknowledged by the client
 * (send-queue.ts). Node's queue alone moves only when the kernel wakes the socket, in steps of a
 * third of a send buffer that autotunes up to 4 MB, far too coarse for these rules. Both are
 * sampled every `stallTimeoutMs / 10` (100 ms to 1 s) while data is waiting, not timed by 'drain'
 * events, which come only at those steps. Chunk framing and headers are counted as queued, so
 * "accepted" is a few bytes low, never high. Even the kernel's count moves only with the client's
 * window updates, seconds apart for slow readers (send-queue.ts): a stall timeout well above ~5 s,
 * like the default 60 s, is what lets these rules judge a slow reader by its real rate.
 *
 * Half-close, measured with Node 20's http server (Fastify 5 runs on it): `httpAllowHalfOpen` is
 * false by default, so when a client shuts its write side (FIN) after its request, Node ends the
 * socket's write side too. During the lookups nothing is queued, so the connection closes at once:
 * the response is destroyed and has emitted 'close' before the writer is made, and the client reads
 * no byte. In the middle of the stream the connection closes once Node's queue has gone out to the
 * kernel (the writer sees 'gone'), and the client's body lacks its terminating chunk; a client that
 * also stops reading never lets that queue out, so only the stall and floor rules drop it.
 *
 * Not a sign of a vanished client: the request's 'close', which Node emits once the request body was
 * read to its end, while the connection still lives; and a response without a socket, which is a
 * pipelined response waiting for the one before it.
 */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { sendQueueProbe, type SendQueueProbe } from './send-queue.js';

/** Why a client was dropped, for logs and metrics. */
export type GoneReason = 'gone' | 'stalled' | 'too-slow' | 'deadline';

const MESSAGES: Record<GoneReason, string> = {
  gone: 'client went away',
  stalled: 'client accepted nothing for the stall timeout',
  'too-slow': 'client accepted bytes more slowly than the drain floor',
  deadline: 'export reached its maximum duration',
};

export class ClientGoneError extends Error {
  override name = 'ClientGoneError';
  constructor(
    readonly reason: GoneReason,
    message = MESSAGES[reason],
  ) {
    super(message);
  }
}

export interface ResponseWriterOptions {
  /** Milliseconds (> 0): stall limit and the drain floor's window (decisions.md D6.4, D8.3). */
  stallTimeoutMs: number;
  /** Bytes per second a client must accept while data waits; 0 turns the floor off (D8.3). */
  minDrainBytesPerS: number;
  /** Milliseconds from construction until the response is aborted; 0 turns the deadline off (D8.3). */
  maxDurationMs: number;
}

/** Cumulative waiting time (ms) and bytes accepted during it. */
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
  /** Waiting time at the sampler's previous tick, ms. */
  private tickWaited = 0;
  /** The previous sample's raw reading; null when the next sample is a new baseline. */
  private last: Point | null = null;
  /** Counted waiting time and accepted bytes, oldest first, covering at least the last window. */
  private points: Point[] = [{ waited: 0, accepted: 0 }];
  /** Counted waiting time at which the client last accepted anything. */
  private progressAt = 0;

  /**
   * Takes over writing to `res`. Throws RangeError on options out of range. When the connection is
   * already gone, the writer is gone at once: check() throws.
   */
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

  /** Bytes handed to the response so far. */
  get bytes(): number {
    return this.handed;
  }

  /** Why the client was dropped; null while it is not. */
  get reason(): GoneReason | null {
    return this.reasonGone;
  }

  /** Aborted with the ClientGoneError when the client is dropped, e.g. to cancel a query. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Throws ClientGoneError when the client went away or was dropped. */
  check(): void {
    if (this.reasonGone === null && this.connectionLost()) this.drop('gone');
    if (this.reasonGone !== null) throw new ClientGoneError(this.reasonGone);
  }

  /**
   * Writes `chunk`; resolves once the response can take more. Rejects with ClientGoneError when the
   * client goes away or is dropped, meanwhile or before.
   */
  async write(chunk: Buffer): Promise<void> {
    this.check();
    if (chunk.length === 0) return;
    this.handed += chunk.length;
    if (this.res.write(chunk)) return;
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
    // No terminating chunk: the client can never take what it got for a complete body (D6.3).
    this.res.destroy();
    const err = new ClientGoneError(reason);
    this.controller.abort(err);
    this.settle?.(err);
  }

  private waitedTotal(): number {
    return this.waitedMs + (this.waitStart < 0 ? 0 : performance.now() - this.waitStart);
  }

  /** A tick of the sampler, which runs while writes wait and stops after a tick without waiting. */
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
    // Node's counters now, the kernel's when the probe answers: bytes Node hands to the kernel
    // meanwhile count as not accepted, so the reading errs low, never high.
    const queued = this.res.writableLength;
    const handed = this.handed;
    const socket = this.res.socket;
    if (this.probe === null && socket) this.probe = sendQueueProbe(socket);
    this.sampling = true;
    void (this.probe?.() ?? Promise.resolve(null))
      .catch(() => null)
      .then((unacked) => {
        this.sampling = false;
        if (this.reasonGone === null && !this.disposed) this.record(waited, Math.max(0, handed - queued - (unacked ?? 0)));
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
