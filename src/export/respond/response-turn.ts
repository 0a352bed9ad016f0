/** A pipelined request's response gets its socket only after the ones before it (D8.10). */
import type { ServerResponse } from 'node:http';

/** Resolves once `res` has its socket; rejects with `signal`'s reason when the client goes first. */
export function responseTurn(res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (res.socket !== null) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onSocket = () => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    };
    const onAbort = () => {
      res.removeListener('socket', onSocket);
      reject(signal.reason);
    };
    if (signal.aborted) return onAbort();
    res.once('socket', onSocket);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
