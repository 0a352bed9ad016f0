/**
 * The HTML rewriting stage of an export (decisions.md D3): for each row of a batch, contentHtml's
 * JSON text as it will be exported. One path whatever runs it: rows whose text the pre-check lets
 * through are kept as stored; the flagged ones are rewritten on a rewrite worker when the batch
 * holds enough of them to pay for the round trip, on the event loop otherwise.
 */
import { contentHtmlAsStored, rewriteContentHtmlJson } from '../encode/document-encoder.js';
import { LARGE_DOCUMENT_BYTES } from './large-garbage.js';
import { DOC, type DocumentRow } from '../snapshot/query.js';
import type { RewritePool } from './rewrite-pool.js';

/** Per row of a batch, contentHtml's JSON text as exported; a promise while a worker rewrites it. */
export type BatchHtml = Buffer[] | Promise<Buffer[]>;

/** Default bytes of flagged contentHtml a batch must hold before it goes to a worker. */
export const OFFLOAD_BYTES = 64 * 1024;

/**
 * contentHtml of every row of `rows` as exported with media URLs under `prefix`. With a pool,
 * batches holding at least `offloadBytes` of flagged HTML are rewritten on a worker (the promise
 * rejects with RewriteWorkerError if that fails; never reported as unhandled before it is awaited).
 */
export function rewriteBatchHtml(rows: readonly DocumentRow[], prefix: string, pool: RewritePool | undefined, offloadBytes: number): BatchHtml {
  const html = new Array<Buffer>(rows.length);
  const flaggedRows: number[] = [];
  const flaggedTexts: Buffer[] = [];
  let flaggedBytes = 0;
  rows.forEach((row, i) => {
    const text = row[DOC.contentHtml];
    const stored = contentHtmlAsStored(text);
    if (stored !== undefined) html[i] = stored;
    // A large document would be copied to a worker and back and rewritten in a second heap:
    // rewritten here, its peak memory counts once (decisions.md D8.4).
    else if (text!.length >= LARGE_DOCUMENT_BYTES) html[i] = rewriteContentHtmlJson(text!, prefix);
    else {
      flaggedRows.push(i);
      flaggedTexts.push(text!);
      flaggedBytes += text!.length;
    }
  });
  if (pool === undefined || flaggedRows.length === 0 || flaggedBytes < offloadBytes) {
    flaggedRows.forEach((row, k) => (html[row] = rewriteContentHtmlJson(flaggedTexts[k]!, prefix)));
    return html;
  }
  const rewritten = pool.rewrite(flaggedTexts, prefix).then((out) => {
    flaggedRows.forEach((row, k) => (html[row] = out[k]!));
    return html;
  });
  rewritten.catch(() => {});
  return rewritten;
}
