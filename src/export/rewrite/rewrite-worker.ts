/**
 * Entry of a rewrite worker thread (rewrite-pool.ts): says it is ready (RewriteReady), then answers
 * each RewriteRequest with its batch rewritten (rewrite-batch.ts), the reply's buffers transferred.
 */
import { parentPort } from 'node:worker_threads';
import { rewriteBatch, type RewriteReady, type RewriteReply, type RewriteRequest } from './rewrite-batch.js';

const port = parentPort;
if (port !== null) {
  port.on('message', (req: RewriteRequest) => {
    let reply: RewriteReply;
    try {
      reply = { id: req.id, ...rewriteBatch(req) };
    } catch (err) {
      port.postMessage({ id: req.id, error: (err as Error).message ?? String(err) } satisfies RewriteReply);
      return;
    }
    port.postMessage(reply, [reply.data.buffer as ArrayBuffer, reply.ends.buffer as ArrayBuffer]);
  });
  port.postMessage({ ready: true } satisfies RewriteReady);
}
