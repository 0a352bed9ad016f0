/**
 * Admission across the fleet (D11.1, D8.2, D8.5): with REDIS_URL the per-user cap is
 * a lease in Redis (user-leases.ts), taken before the instance's own slot and queue
 * (admission.ts), held while the export waits and streams, given back when it ends. Slots and the
 * queue stay per instance: each protects its own connections.
 */
import { ClientGoneError } from '../../errors.js';
import type { ExportAdmission } from './admission.js';
import type { UserLeases } from './user-leases.js';

export interface Admitted {
  /** Gives the slot and the lease back; calling it again does nothing. */
  release(): void;
  /** Aborts (reason: LeaseLostError) when the fleet-wide lease is lost while held; null without Redis. */
  lost: AbortSignal | null;
}

export class FleetAdmission {
  constructor(
    private readonly local: ExportAdmission,
    private readonly leases: UserLeases | null,
  ) {}

  get streaming(): number {
    return this.local.streaming;
  }

  get waiting(): number {
    return this.local.waiting;
  }

  /**
   * A place for `userId`'s export, with a database slot when `slot`. Throws ApiError (429 from the
   * fleet-wide or local cap, 503 from the queue), DependencyError ('redis': 503, fails closed) or
   * ClientGoneError.
   */
  async acquire(userId: string, signal: AbortSignal, slot: boolean): Promise<Admitted> {
    if (this.leases === null) return { release: await this.local.acquire(userId, signal, slot), lost: null };
    let lease;
    try {
      lease = await this.leases.acquire(userId, signal);
    } catch (err) {
      if (signal.aborted) throw new ClientGoneError('gone', 'client went away before its export started');
      throw err;
    }
    let release: () => void;
    try {
      release = await this.local.acquire(userId, signal, slot);
    } catch (err) {
      void lease.release();
      throw err;
    }
    return {
      release: () => {
        release();
        void lease.release();
      },
      lost: lease.lost,
    };
  }
}
