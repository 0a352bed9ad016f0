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
 * `parts` laid end to end in one fresh buffer of their own, not from Node's shared pool (which
 * cannot be transferred); part i ends at byte `ends[i]`.
 */
function packed(parts: readonly Buffer[]): { data: Uint8Array; ends: Uint32Array } {
  let total = 0;
  for (const p of parts) total += p.length;
  const data = Buffer.allocUnsafeSlow(total);
  const ends = new Uint32Array(parts.length);
  let at = 0;
  parts.forEach((p, i) => {
    data.set(p, at);
    at += p.length;
    ends[i] = at;
  });
  return { data, ends };
}

/** The parts of a packed buffer, in order, as views of it. */
function unpacked({ data, ends }: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  const all = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let start = 0;
  return Array.from(ends, (end) => {
    const part = all.subarray(start, end);
    start = end;
    return part;
  });
}

/**
 * `texts` packed in one fresh buffer, as a request whose two buffers can be transferred (the
 * caller keeps `texts`: a batch can be packed again to be re-sent to another worker).
 */
export function packRequest(id: number, prefix: string, texts: readonly Buffer[]): RewriteRequest {
  return { id, prefix, ...packed(texts) };
}

/** The plans of a successful reply, in the order of the texts sent. */
export function unpackReply(reply: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  return unpacked(reply);
}

/** Plans every text of `req`; the reply's buffers are fresh, so they can be transferred. */
export function rewriteBatch(req: RewriteRequest): { data: Uint8Array; ends: Uint32Array } {
  return packed(unpacked(req).map((text) => contentHtmlPlan(text, req.prefix)));
}
