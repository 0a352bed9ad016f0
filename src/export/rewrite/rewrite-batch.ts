/**
 * What a rewrite worker (rewrite-worker.ts) does with one batch: the media URLs of flagged
 * contentHtml JSON texts rewritten (decisions.md D3) by the function the event loop uses
 * (rewriteContentHtmlJson), so both paths give the same bytes; and the messages it exchanges.
 */
import { rewriteContentHtmlJson } from '../encode/document-encoder.js';

/** A batch of JSON texts laid end to end in `data`; text i ends at byte `ends[i]`. */
export interface RewriteRequest {
  id: number;
  prefix: string;
  data: Uint8Array;
  ends: Uint32Array;
}

/** The rewritten texts laid out the same way; an empty text means "unchanged". */
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

/** The texts of a successful reply to `texts`, in order; an unchanged text is the input Buffer itself. */
export function unpackReply(texts: readonly Buffer[], reply: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  const data = Buffer.from(reply.data.buffer, reply.data.byteOffset, reply.data.byteLength);
  let start = 0;
  return texts.map((text, i) => {
    const end = reply.ends[i]!;
    const out = end === start ? text : data.subarray(start, end);
    start = end;
    return out;
  });
}

/** Rewrites every text of `req`; the reply's buffers are fresh, so they can be transferred. */
export function rewriteBatch(req: RewriteRequest): { data: Uint8Array; ends: Uint32Array } {
  const input = Buffer.from(req.data.buffer, req.data.byteOffset, req.data.byteLength);
  const changed: (Buffer | null)[] = [];
  let total = 0;
  let start = 0;
  for (const end of req.ends) {
    const text = input.subarray(start, end);
    const out = rewriteContentHtmlJson(text, req.prefix);
    start = end;
    changed.push(out === text ? null : out);
    if (out !== text) total += out.length;
  }
  // Copied into one buffer of its own: one transfer, and not from Node's shared pool, which
  // cannot be transferred.
  const data = Buffer.allocUnsafeSlow(total);
  const ends = new Uint32Array(changed.length);
  let at = 0;
  changed.forEach((out, i) => {
    if (out !== null) {
      data.set(out, at);
      at += out.length;
    }
    ends[i] = at;
  });
  return { data, ends };
}
