/**
 * The HTML rewriting stage of an export (decisions.md D3): for each row of a batch, contentHtml's
 * JSON text as it will be exported. One path whatever runs it: rows whose text the pre-check lets
 * through are kept as stored; a flagged row whose stored rewrite plan matches its text and the
 * prefix (plan-store.ts, rewrite-plan.ts) is spliced without tokenizing; the rest are planned by
 * parse5's tokenizer, on a rewrite worker when the batch holds enough of them to pay for the round
 * trip, on the event loop otherwise, and their new plans are offered to the plan writer.
 */
import { contentHtmlAsStored, contentHtmlPlan, type ContentHtmlJson } from '../encode/document-encoder.js';
import { LARGE_DOCUMENT_BYTES } from './large-garbage.js';
import { DOC, type DocumentRow } from '../snapshot/query.js';
import type { RewritePool } from './rewrite-pool.js';
import { readStoredPlan, type PlanWriter } from './plan-store.js';
import { contentDigest, jsonPrefixBytes, planKey, PlanFormatError, planParts } from './rewrite-plan.js';

/** Per row of a batch, contentHtml's JSON text as exported; a promise while a worker rewrites it. */
export type BatchHtml = ContentHtmlJson[] | Promise<ContentHtmlJson[]>;

/** Default bytes of flagged contentHtml a batch must hold before it goes to a worker. */
export const OFFLOAD_BYTES = 64 * 1024;

/** How an export rewrites contentHtml. */
interface HtmlStageOptions {
  /** The media proxy prefix, normalised (decisions.md D3.1). */
  prefix: string;
  /** Rewrite workers; without them rows are planned on the event loop. */
  pool?: RewritePool | undefined;
  /** Bytes of flagged contentHtml to plan before a batch goes to the pool. */
  offloadBytes: number;
  /** Whether stored plans are used and new ones offered (REWRITE_PLANS); off: every flagged row is tokenized. */
  plans?: PlanUse | undefined;
}

/** Stored plans in use: the writer new plans go to (none: used, not written) and counts for metrics. */
export interface PlanUse {
  writer?: PlanWriter | undefined;
  counts: PlanUseCounts;
}

/** Flagged rows spliced from a stored plan, and flagged rows tokenized. */
interface PlanUseCounts {
  reused: number;
  computed: number;
}

/** A flagged row to be tokenized, and the contentDigest its new plan's key is made from. */
interface Pending {
  row: number;
  text: Buffer;
  digest: Buffer | null;
}

/**
 * contentHtml of every row of `rows` as exported (decisions.md D3). With a pool, batches holding
 * at least `offloadBytes` of flagged HTML to tokenize are planned on a worker (the promise rejects
 * with RewriteWorkerError if that fails; never reported as unhandled before it is awaited).
 */
export function rewriteBatchHtml(rows: readonly DocumentRow[], opts: HtmlStageOptions): BatchHtml {
  const { prefix, pool, plans } = opts;
  const pj = jsonPrefixBytes(prefix);
  const html = new Array<ContentHtmlJson>(rows.length);
  const pending: Pending[] = [];
  let pendingBytes = 0;
  const planned = (p: Pending, plan: Buffer) => {
    html[p.row] = planParts(p.text, plan, pj);
    if (p.digest !== null && plans?.writer) plans.writer.offer(documentId(rows[p.row]!), planKey(p.digest, plan), plan);
  };
  rows.forEach((row, i) => {
    const text = row[DOC.contentHtml];
    const stored = contentHtmlAsStored(text);
    if (stored !== undefined) {
      html[i] = stored;
      return;
    }
    let digest: Buffer | null = null;
    if (plans) {
      digest = contentDigest(text!, prefix);
      const reused = fromStoredPlan(row, text!, digest, pj);
      if (reused !== null) {
        html[i] = reused;
        plans.counts.reused++;
        return;
      }
      plans.counts.computed++;
    }
    const p = { row: i, text: text!, digest };
    // A large document would be copied to a worker and back and tokenized in a second heap:
    // planned here, its peak memory counts once (decisions.md D8.4).
    if (text!.length >= LARGE_DOCUMENT_BYTES) planned(p, contentHtmlPlan(text!, prefix));
    else {
      pending.push(p);
      pendingBytes += text!.length;
    }
  });
  if (pool === undefined || pending.length === 0 || pendingBytes < opts.offloadBytes) {
    for (const p of pending) planned(p, contentHtmlPlan(p.text, prefix));
    return html;
  }
  const texts = pending.map((p) => p.text);
  const rewritten = pool.plan(texts, prefix).then((out) => {
    pending.forEach((p, k) => planned(p, out[k]!));
    return html;
  });
  rewritten.catch(() => {});
  return rewritten;
}

/**
 * Row `row`'s text `text` spliced by its stored plan when that plan was computed from the text's
 * `digest` (contentDigest) and stored as computed (planKey); otherwise null.
 */
function fromStoredPlan(row: DocumentRow, text: Buffer, digest: Buffer, pj: Buffer): Buffer[] | null {
  const stored = readStoredPlan(row[DOC.plan]);
  if (stored === null || !planKey(digest, stored.plan).equals(stored.key)) return null;
  try {
    return planParts(text, stored.plan, pj);
  } catch (err) {
    // Only a plan computed wrongly can fail to fit the text its key names: tokenize, and replace it.
    if (err instanceof PlanFormatError) return null;
    throw err;
  }
}

/** The document id of a row, as stored (the cursor returns it as JSON text). */
function documentId(row: DocumentRow): string {
  return JSON.parse(row[DOC.id].toString('utf8')) as string;
}
