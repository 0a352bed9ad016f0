/**
 * contentHtml's JSON text rewritten the ways an export rewrites it, for the tests: by the rewrite
 * pool's plans, by the plan of the event loop's rewriter, through the HTML stage.
 */
import { jsonPrefixBytes, planParts } from '../../src/export/rewrite/rewrite-plan.js';
import type { RewritePool } from '../../src/export/rewrite/rewrite-pool.js';
import { contentHtmlPlan, type ContentHtmlJson } from '../../src/export/encode/document-encoder.js';
import { rewriteBatchHtml } from '../../src/export/rewrite/html-stage.js';
import type { DocumentRow } from '../../src/export/snapshot/query.js';

/**
 * JSON text `json` with plan `plan` applied under `prefix`, as one Buffer: its parts (planParts,
 * what the HTML stage writes) joined; `json` itself for an empty plan.
 */
export function applyPlan(json: Buffer, plan: Buffer, prefix: string): Buffer {
  return plan.length === 0 ? json : Buffer.concat(planParts(json, plan, jsonPrefixBytes(prefix)));
}

/** `texts` rewritten under `prefix` by `pool`'s workers: their plans, applied here. */
export async function rewrittenByPool(pool: RewritePool, texts: Buffer[], prefix: string): Promise<Buffer[]> {
  const plans = await pool.plan(texts, prefix);
  return plans.map((plan, i) => applyPlan(texts[i]!, plan, prefix));
}

/**
 * contentHtml's JSON text `j` rewritten under `prefix` the way the HTML stage rewrites a flagged
 * text: the rewriter's plan (contentHtmlPlan), applied. Unlike the stage it also takes `""` and
 * texts the pre-check lets through, which it returns unchanged when nothing is rewritten.
 */
export function rewriteJsonText(j: Buffer, prefix: string): Buffer {
  return applyPlan(j, contentHtmlPlan(j, prefix), prefix);
}

/** Row `row`'s contentHtml as the export's HTML stage gives it under `prefix` (on the event loop, no stored plans). */
export function stageHtmlOf(row: DocumentRow, prefix: string): ContentHtmlJson {
  return (rewriteBatchHtml([row], { prefix, offloadBytes: 0 }) as ContentHtmlJson[])[0]!;
}
