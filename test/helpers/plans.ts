/**
 * contentHtml's JSON text rewritten the ways an export rewrites it, for the tests: by the rewrite
 * pool's plans, by the event loop's planner, and a row encoded the way the rewrite stage and the
 * encoder together write it (synchronously, for the encoder's tests; rewrite-stage.test.ts holds
 * the stage to the same bytes).
 */
import { encodeDocument } from '../../src/export/encode/document-encoder.js';
import type { JsonChunker } from '../../src/export/encode/json-encoder.js';
import type { DocumentRow } from '../../src/export/snapshot/rows.js';
import { stagedRow } from '../../bench/lib/rows.js';
import { planContentHtml } from '../../src/export/rewrite/plans/html-plan.js';
import { planPieces } from '../../src/export/rewrite/plans/plan-splice.js';
import { jsonPrefixBytes } from '../../src/export/rewrite/plans/rewrite-plan.js';
import type { RewritePool } from '../../src/export/rewrite/workers/rewrite-pool.js';

/** JSON text `json` with plan `plan` applied under `prefix`, as one Buffer. */
export function applyPlan(json: Buffer, plan: Buffer, prefix: string): Buffer {
  return plan.length === 0 ? json : Buffer.concat([...planPieces(json, plan, jsonPrefixBytes(prefix))]);
}

/** `texts` rewritten under `prefix` by `pool`'s workers: their plans, applied here. */
export async function rewrittenByPool(pool: RewritePool, texts: Buffer[], prefix: string): Promise<Buffer[]> {
  const plans = await pool.plan(texts, prefix);
  return plans.map((plan, i) => applyPlan(texts[i]!, plan, prefix));
}

/**
 * contentHtml's JSON text `j` rewritten under `prefix` by the planner the stage uses, applied.
 * Unlike the stage it also takes `""` and texts the pre-check lets through.
 */
export function rewriteJsonText(j: Buffer, prefix: string): Buffer {
  return applyPlan(j, planContentHtml(j, prefix), prefix);
}

/** Appends row `row` to `out` as the export writes it under `prefix`. */
export function encodeStaged(row: DocumentRow, prefix: string, out: JsonChunker): void {
  const { coverUrl, html } = stagedRow(row, prefix);
  encodeDocument(row, coverUrl, out, html);
}

export { stagedRow };
