/** Entry of a rewrite worker thread: RewriteReady once, then each batch's plans, buffers transferred. */
import { parentPort } from 'node:worker_threads';
import { rewriteBatch, type RewriteReady, type RewriteReply, type RewriteRequest } from './rewrite-batch.js';

/** A batch from which the worker collects its garbage once it has answered. */
const LARGE_BATCH_BYTES = 1024 * 1024;

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
    // A large text leaves its size several times over in strings that V8 frees only in a full
    // collection, which Node 24 starts much later than Node 20 (20 × 8 MB documents: peak RSS 249 MB
    // against 213 MB with this). Off the event loop, so no other export waits for it (D8.8);
    // `gc` is there when the executable's --expose-gc is.
    if (req.data.byteLength >= LARGE_BATCH_BYTES) (globalThis as { gc?: () => void }).gc?.();
  });
  port.postMessage({ ready: true } satisfies RewriteReady);
}
