/**
 * Admission (D8.1, D8.2, D8.9): database slots, a queue in arrival order, and a per-user
 * cap counting queued and cached exports too; a client that leaves while it waits costs nothing.
 */
import { ApiError, ClientGoneError, RETRY_AFTER_S } from '../../errors.js';

/** EXPORT_CONCURRENCY, EXPORT_QUEUE_MAX, EXPORT_QUEUE_TIMEOUT_MS, EXPORT_PER_USER_MAX. */
interface AdmissionLimits {
  concurrency: number;
  queueMax: number;
  queueTimeoutMs: number;
  perUserMax: number;
}

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

  get streaming(): number {
    return this.#streaming;
  }

  get waiting(): number {
    return this.#queue.length;
  }

  /** With a database slot when `slot`. Throws ApiError (429 D8.2, 503 D8.1) or ClientGoneError. */
  async acquire(userId: string, signal: AbortSignal, slot = true): Promise<Release> {
    if (signal.aborted) throw new ClientGoneError('gone', 'client went away before its export started');
    const held = this.#perUser.get(userId) ?? 0;
    if (held >= this.limits.perUserMax) {
      throw new ApiError('RATE_LIMITED', `At most ${this.limits.perUserMax} exports per user at once`, RETRY_AFTER_S);
    }
    if (!slot) return this.#place(userId);
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
          () =>
            leave(
              new ApiError('SERVICE_UNAVAILABLE', 'No export slot became free in time, retry later', RETRY_AFTER_S),
            ),
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

  #hold(userId: string): Release {
    return this.#place(userId, () => {
      // The slot goes straight to the longest waiter, so a newcomer cannot overtake the queue.
      const next = this.#queue.shift();
      if (next !== undefined) next.grant();
      else this.#streaming--;
    });
  }

  #place(userId: string, andThen: () => void = () => {}): Release {
    this.#perUser.set(userId, (this.#perUser.get(userId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#drop(userId);
      andThen();
    };
  }

  #drop(userId: string): void {
    const n = (this.#perUser.get(userId) ?? 1) - 1;
    if (n <= 0) this.#perUser.delete(userId);
    else this.#perUser.set(userId, n);
  }
}
