/** A worker's batch and messages; plans come from the event loop's own function, so both paths give the same bytes. */
import { planContentHtml } from '../plans/html-plan.js';

/** A batch of JSON texts laid end to end in `data`; text i ends at byte `ends[i]`. */
export interface RewriteRequest {
  id: number;
  prefix: string;
  data: Uint8Array;
  ends: Uint32Array;
}

/** The texts' plans laid out the same way; an empty plan means "unchanged". */
export type RewriteReply = { id: number; data: Uint8Array; ends: Uint32Array } | { id: number; error: string };

/** Sent once a worker has loaded: a later death is then a batch's fault, not a failed start. */
export interface RewriteReady {
  ready: true;
}

/** `parts` end to end in a fresh buffer (Node's shared pool cannot be transferred); part i ends at `ends[i]`. */
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

function unpacked({ data, ends }: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  const all = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let start = 0;
  return Array.from(ends, (end) => {
    const part = all.subarray(start, end);
    start = end;
    return part;
  });
}

export function packRequest(id: number, prefix: string, texts: readonly Buffer[]): RewriteRequest {
  return { id, prefix, ...packed(texts) };
}

export function unpackReply(reply: { data: Uint8Array; ends: Uint32Array }): Buffer[] {
  return unpacked(reply);
}

/**
 * Each text is decoded and tokenized whole: pieces only keep the event loop's steps short (D8.8), and
 * parse5 buffers an unfinished token, so a long attribute fed in pieces is copied again with each one.
 */
export function rewriteBatch(req: RewriteRequest): { data: Uint8Array; ends: Uint32Array } {
  return packed(unpacked(req).map((text) => planContentHtml(text, req.prefix, text.length)));
}
