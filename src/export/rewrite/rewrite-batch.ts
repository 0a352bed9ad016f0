/**
 * What a rewrite worker (rewrite-worker.ts) does with one batch: the rewrite plans (rewrite-plan.ts)
 * of flagged contentHtml JSON texts (decisions.md D3), computed by the function the event loop uses
 * (contentHtmlPlan), so both paths give the same bytes; and the messages it exchanges. Only the
 * plans travel back, a few bytes per document: the event loop applies them to the texts it kept.
 */
import { contentHtmlPlan } from '../encode/document-encoder.js';

/** A batch of JSON texts laid end to end in `data`; text i ends at byte `ends[i]`. */
export interface RewriteRequest {
  id: number;
  prefix: string;
  data: Uint8Array;
  ends: Uint32Array;
}

/** The texts' plans laid out the same way; an empty plan means "unchanged". */
export type RewriteReply = { id: number; data: Uint8Array; ends: Uint32Array } | { id: number; error: string };

/**
 * Sent once by a worker when its module has loaded and it listens for batches: the pool then knows
 * that a later death was caused by a batch, not by the worker failing to start.
 */
export interface RewriteReady {
  ready: true;
}

/**
 * `texts` laid end to end in one fresh buffer, as a request whose two buffers can be transferred
 * (the caller keeps `texts`: a batch can be packed again to be re-sent to another worker).
 */
export function packRequest(id: number, prefix: string, texts: readonly Buffer[]): RewriteRequest {
  let total = 0;
  for (const t of texts) total += t.length;
  const data = new Uint8Array(total);
  const ends = new Uint32Array(texts.length);
  let at = 0;
  texts.forEach((t, i) => {
    data.set(t, at);
    at += t.length;
    ends[i] = at;
  });
  return { id, prefix, data, ends };
}

/** The plans of a successful reply, in the order of the texts sent. */
export function unpackReply(reply: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  const data = Buffer.from(reply.data.buffer, reply.data.byteOffset, reply.data.byteLength);
  let start = 0;
  return Array.from(reply.ends, (end) => {
    const plan = data.subarray(start, end);
    start = end;
    return plan;
  });
}

/** Plans every text of `req`; the reply's buffers are fresh, so they can be transferred. */
export function rewriteBatch(req: RewriteRequest): { data: Uint8Array; ends: Uint32Array } {
  const input = Buffer.from(req.data.buffer, req.data.byteOffset, req.data.byteLength);
  const plans: Buffer[] = [];
  let total = 0;
  let start = 0;
  for (const end of req.ends) {
    const plan = contentHtmlPlan(input.subarray(start, end), req.prefix);
    start = end;
    plans.push(plan);
    total += plan.length;
  }
  // Copied into one buffer of its own: one transfer, and not from Node's shared pool, which
  // cannot be transferred.
  const data = Buffer.allocUnsafeSlow(total);
  const ends = new Uint32Array(plans.length);
  let at = 0;
  plans.forEach((plan, i) => {
    data.set(plan, at);
    at += plan.length;
    ends[i] = at;
  });
  return { data, ends };
}
