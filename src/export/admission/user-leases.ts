/**
 * The per-user export cap across the fleet (D11.1, D8.2): one redis-semaphore
 * `Semaphore` per user, renewed here (its own refresh timer lets a Redis error escape unhandled,
 * redis-semaphore#199) while the export streams; a lease not renewed within its TTL is dropped, so
 * a dead instance's share comes back within seconds. Redis unreachable: DependencyError, 503
 * (D8.5). A lease lost while streaming aborts `lease.lost`, and the export fails like any failure
 * after the first byte. Scores are instance clocks: the TTL stays well above any clock skew.
 */
import type { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { withTimeout } from '../../db/dependency.js';
import { ApiError, DependencyError, RETRY_AFTER_S } from '../../errors.js';

/** The user already streams EXPORT_PER_USER_MAX exports across the fleet: 429 RATE_LIMITED (D8.2). */
export class UserCapReachedError extends ApiError {
  override name = 'UserCapReachedError';
  constructor(perUserMax: number) {
    super('RATE_LIMITED', `At most ${perUserMax} exports per user at once`, RETRY_AFTER_S);
  }
}

/** Why `lease.lost` aborted. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
}

export interface UserLease {
  /** Gives the lease back. Never rejects: a release that fails leaves the lease to expire. Idempotent. */
  release(): Promise<void>;
  /** Aborts (reason: LeaseLostError) when the lease is lost while held. */
  readonly lost: AbortSignal;
}

interface Log {
  warn(obj: object, msg: string): void;
}

export interface UserLeasesOptions {
  /** The shared client (app.ts's: no offline queue, short command timeout). */
  redis: Redis;
  /** REDIS_KEY_PREFIX: a user's lease key is `<prefix>-exports:<userId>`. */
  keyPrefix: string;
  /** EXPORT_PER_USER_MAX. */
  perUserMax: number;
  /** Bound on each Redis call, ms (D8.5). */
  timeoutMs: number;
  /** How long a lease outlives its last renewal, ms: a dead instance's share comes back after this. */
  ttlMs?: number;
  log: Log;
}

const DEFAULT_TTL_MS = 10_000;

export class UserLeases {
  readonly #opts: Required<UserLeasesOptions>;
  #held = 0;
  #lost = 0;

  constructor(opts: UserLeasesOptions) {
    this.#opts = { ttlMs: DEFAULT_TTL_MS, ...opts };
  }

  /** Leases this instance holds now. */
  get held(): number {
    return this.#held;
  }

  /** Leases lost while held, since start. */
  get lost(): number {
    return this.#lost;
  }

  /**
   * A lease on one of `userId`'s EXPORT_PER_USER_MAX places, tried once (no waiting). Throws
   * UserCapReachedError when all are held, DependencyError ('redis') when Redis does not
   * answer in time or fails, or `signal`'s reason when it aborts first.
   */
  async acquire(userId: string, signal: AbortSignal): Promise<UserLease> {
    signal.throwIfAborted();
    const { redis, perUserMax, ttlMs, timeoutMs } = this.#opts;
    const key = `${this.#opts.keyPrefix}-exports:${userId}`;
    const options = {
      lockTimeout: ttlMs,
      acquireTimeout: timeoutMs,
      acquireAttemptsLimit: 1,
      retryInterval: 0,
      refreshInterval: 0,
    };
    const semaphore = new Semaphore(redis, key, perUserMax, options);
    const attempt = semaphore.tryAcquire(signal);
    let acquired: boolean;
    try {
      acquired = await withTimeout(attempt, timeoutMs, 'redis', 'per-user export lease');
    } catch (err) {
      // Should the attempt still succeed, its lease is given back rather than left to expire.
      void attempt.then((ok) => (ok ? semaphore.release() : undefined)).catch(() => {});
      if (signal.aborted) throw signal.reason;
      throw outage(err);
    }
    if (!acquired) throw new UserCapReachedError(perUserMax);
    return this.#hold(semaphore, key, userId);
  }

  #hold(semaphore: Semaphore, key: string, userId: string): UserLease {
    const { redis, perUserMax, ttlMs, timeoutMs, log } = this.#opts;
    this.#held++;
    const lost = new AbortController();
    let released = false;
    let lastRenewed = Date.now();
    let renewing = false;
    const lose = (why: string, err?: unknown) => {
      clearInterval(timer);
      this.#lost++;
      log.warn({ userId, ...(err === undefined ? {} : { err }) }, `per-user export lease lost: ${why}`);
      lost.abort(new LeaseLostError(why));
    };
    const renew = async () => {
      if (renewing || released || lost.signal.aborted) return;
      renewing = true;
      // redis-semaphore's documented way to refresh a lease held elsewhere: tryAcquire() refreshes it.
      const refresh = new Semaphore(redis, key, perUserMax, {
        identifier: semaphore.identifier,
        acquiredExternally: true,
        lockTimeout: ttlMs,
        refreshInterval: 0,
      });
      try {
        const ok = await withTimeout(refresh.tryAcquire(), timeoutMs, 'redis', 'per-user export lease renewal');
        if (released) return;
        if (ok) lastRenewed = Date.now();
        else lose('it expired or was removed from Redis');
      } catch (err) {
        if (!released && Date.now() - lastRenewed >= ttlMs) lose(`not renewed within ${ttlMs} ms`, err);
      } finally {
        renewing = false;
      }
    };
    // Three tries per TTL, so one slow or failed renewal does not lose the lease.
    const timer = setInterval(() => void renew(), Math.max(1, Math.floor(ttlMs / 3)));
    timer.unref();
    return {
      lost: lost.signal,
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(timer);
        this.#held--;
        try {
          await withTimeout(semaphore.release(), timeoutMs, 'redis', 'per-user export lease release');
        } catch (err) {
          log.warn({ userId, err }, 'per-user export lease not released: it expires by itself');
        }
      },
    };
  }
}

function outage(err: unknown): DependencyError {
  if (err instanceof DependencyError) return err;
  return new DependencyError('redis', `rate-limit store unavailable: ${(err as Error).message}`, { cause: err });
}
