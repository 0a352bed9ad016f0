/**
 * Knowing, from the first moment of a request, that its client went away: the key and book
 * lookups and the wait for an export slot come before the export's ResponseWriter exists, and a
 * client that closes (or half-closes: Node then ends the socket) during them must free its place at
 * once and never reach the database (decisions.md D6.4, D8.1).
 */
import type { ServerResponse } from 'node:http';

interface ClientWatch {
  /** Aborts when the connection closes before the response finished. */
  signal: AbortSignal;
  /** Stops watching (the response is done, or someone else watches now). */
  dispose(): void;
}

/** Watches `res`'s connection; the signal is aborted at once when it is already closed. */
export function watchClient(res: ServerResponse): ClientWatch {
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  if (res.destroyed || res.socket === null || res.socket.destroyed) controller.abort();
  else res.once('close', onClose);
  return { signal: controller.signal, dispose: () => res.removeListener('close', onClose) };
}
