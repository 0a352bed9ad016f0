/** Knowing from a request's first moment that its client left, so it frees its place at once (D6.4, D8.1). */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ClientGoneError } from '../../errors.js';

export interface ClientWatch {
  signal: AbortSignal;
  dispose(): void;
}

/** Watches the connection, not the response: a pipelined response has no socket yet (response-turn.ts). */
export function watchClient(req: IncomingMessage, res: ServerResponse): ClientWatch {
  const controller = new AbortController();
  const socket = req.socket;
  const gone = () => controller.abort(new ClientGoneError('gone', 'client went away before its export started'));
  const onClose = () => {
    if (!res.writableFinished) gone();
  };
  if (res.destroyed || socket.destroyed) gone();
  else socket.once('close', onClose);
  return { signal: controller.signal, dispose: () => socket.removeListener('close', onClose) };
}
