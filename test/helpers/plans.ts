/**
 * The rewrite pool's plans applied to the texts they were computed for: the JSON texts an export
 * gets from a batch sent to the workers (src/export/rewrite/html-stage.ts does the same).
 */
import { applyPlan, jsonPrefixBytes } from '../../src/export/rewrite/rewrite-plan.js';
import type { RewritePool } from '../../src/export/rewrite/rewrite-pool.js';

/** `texts` rewritten under `prefix` by `pool`'s workers: their plans, applied here. */
export async function rewrittenByPool(pool: RewritePool, texts: Buffer[], prefix: string): Promise<Buffer[]> {
  const plans = await pool.plan(texts, prefix);
  return plans.map((plan, i) => applyPlan(texts[i]!, plan, jsonPrefixBytes(prefix)));
}
