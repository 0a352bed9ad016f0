/** How sending a body ended, for either path an export takes (a snapshot, or a kept body). */
import type { GoneReason } from '../../errors.js';

export interface Sent {
  outcome: 'complete' | 'client_gone';
  /** Why the client was dropped, when it was (D6.4, D8.3). */
  reason?: GoneReason;
  /** Bytes written to the socket. */
  bytes: number;
}

/** Rejects with `stop`'s reason once it aborts; never settles without `stop` (the fleet-wide lease's loss, D11.1). */
export function stopped(stop: AbortSignal | null): Promise<never> {
  const settled = new Promise<never>((_, reject) => {
    if (stop?.aborted) reject(stop.reason);
    else stop?.addEventListener('abort', () => reject(stop.reason), { once: true });
  });
  settled.catch(() => {});
  return settled;
}
