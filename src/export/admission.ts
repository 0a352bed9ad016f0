/**
 * Admission control in front of the export pool (decisions.md D8.1, D8.2): at most `concurrency`
 * exports stream at once, up to `queueMax` more wait in arrival order for at most `queueTimeoutMs`,
 * and one user holds at most `perUserMax` of the streaming and waiting places. A request that
 * cannot wait is refused at once with an envelope that carries `Retry-After`; one whose client
 * leaves while it waits leaves the queue and never reaches the database.
 */
import { ApiError } from '../errors.js';
import { ClientGoneError } from './respond/response-writer.js';

interface AdmissionLimits {
  /** Exports that stream at once: the export pool's size (EXPORT_CONCURRENCY). */
  concurrency: number;
  /** Exports that may wait for a slot (EXPORT_QUEUE_MAX). */
  queueMax: number;
  /** Longest wait for a slot, ms (EXPORT_QUEUE_TIMEOUT_MS). */
  queueTimeoutMs: number;
  /** Places (streaming or waiting) one user may hold (EXPORT_PER_USER_MAX). */
  perUserMax: number;
}

/** Seconds a refused client is told to wait: about one short export's time, so retries spread out. */
export const RETRY_AFTER_S = 5;

/** Gives the slot back; calling it again does nothing. */
type Release = () => void;

interface Waiter {
  grant: () => void;
}

export class ExportAdmission {
  #streaming = 0;
  readonly #queue: Waiter[] = [];
  readonly #perUser = new Map<string, number>();

  constructor(private readonly limits: AdmissionLimits) {}

  /** Exports holding a slot. */
  get streaming(): number {
    return this.#streaming;
  }

  /** Exports waiting for one. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * Waits for an export slot for `userId`. Throws ApiError RATE_LIMITED (the user's cap,
   * decisions.md D8.2), SERVICE_UNAVAILABLE (queue full, or the wait timed out, D8.1), or
   * ClientGoneError when `signal` aborts first (the client left; nothing was started).
   */
  async acquire(userId: string, signal: AbortSignal): Promise<Release> {
    if (signal.aborted) throw new ClientGoneError('gone', 'client went away before its export started');
    const held = this.#perUser.get(userId) ?? 0;
    if (held >= this.limits.perUserMax) {
      throw new ApiError('RATE_LIMITED', `At most ${this.limits.perUserMax} exports per user at once`, RETRY_AFTER_S);
    }
    if (this.#streaming < this.limits.concurrency && this.#queue.length === 0) {
      this.#streaming++;
      return this.#hold(userId);
    }
    if (this.#queue.length >= this.limits.queueMax) {
      throw new ApiError('SERVICE_UNAVAILABLE', 'Too many exports are running and waiting, retry later', RETRY_AFTER_S);
    }
    this.#perUser.set(userId, held + 1);
    try {
      await new Promise<void>((resolve, reject) => {
        const leave = (err: Error) => {
          const i = this.#queue.indexOf(waiter);
          if (i >= 0) this.#queue.splice(i, 1);
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          reject(err);
        };
        const onAbort = () => leave(new ClientGoneError('gone', 'client went away while its export waited'));
        const timer = setTimeout(
          () => leave(new ApiError('SERVICE_UNAVAILABLE', 'No export slot became free in time, retry later', RETRY_AFTER_S)),
          this.limits.queueTimeoutMs,
        );
        const waiter: Waiter = {
          grant: () => {
            clearTimeout(timer);
            signal.removeEventListener('abort', onAbort);
            resolve();
          },
        };
        signal.addEventListener('abort', onAbort, { once: true });
        this.#queue.push(waiter);
      });
    } finally {
      this.#drop(userId);
    }
    return this.#hold(userId);
  }

  /** Counts a slot of `userId` and returns its release. */
  #hold(userId: string): Release {
    this.#perUser.set(userId, (this.#perUser.get(userId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#drop(userId);
      // The slot goes straight to the longest waiter, so a newcomer cannot overtake the queue.
      const next = this.#queue.shift();
      if (next !== undefined) next.grant();
      else this.#streaming--;
    };
  }

  #drop(userId: string): void {
    const n = (this.#perUser.get(userId) ?? 1) - 1;
    if (n <= 0) this.#perUser.delete(userId);
    else this.#perUser.set(userId, n);
  }
}
