/** The rewrite stage (D3): stored HTML kept, or a stored plan spliced, or planned on a worker or in slices (D8.8). */
import { PlanFormatError } from '../../errors.js';
import type { BatchRewrites, ContentHtmlJson } from '../encode/document-encoder.js';
import { DOC, documentIdOf, rowBytes, type DocumentRow } from '../encode/rows.js';
import { planContentHtmlSliced } from './plans/html-plan.js';
import { readStoredPlan, type PlanWriter } from './plans/plan-store.js';
import { planSplice, splicedLength } from './plans/plan-splice.js';
import { jsonPrefixBytes, planKey, PLAN_KEY_BYTES, storedPlanMatches } from './plans/rewrite-plan.js';
import { jsonHtmlMayNeedRewrite } from './rewriter/html-rewriter.js';
import { rewriteMediaUrl } from './rewriter/media-url.js';
import type { RewritePool } from './workers/rewrite-pool.js';
import type { Pause } from '../../event-loop.js';

/** A document at least this large (contentHtml's JSON bytes) goes to a worker alone; on the event loop every one is planned in slices. */
export const LARGE_DOCUMENT_BYTES = 1024 * 1024;

/** Stored plans in use: the writer new plans go to (none: used, not written) and counts for metrics. */
export interface PlanUse {
  writer: PlanWriter | null;
  counts: { reused: number; computed: number };
}

export interface RewriteStageOptions {
  prefix: string;
  pool: RewritePool | null;
  /** Bytes of flagged contentHtml to plan before a batch goes to the pool. */
  offloadBytes: number;
  /** Stored plans (REWRITE_PLANS), read with the rows (DOC.plan); null: every flagged row is tokenized. */
  plans: PlanUse | null;
  pause: Pause;
}

interface Pending {
  row: number;
  text: Buffer;
}

/** `cover.url`'s JSON text as exported (decisions.md D3.6), or null when there is no cover (D2.4). */
function coverUrlJson(stored: Buffer | null, prefix: string): Buffer | null {
  if (stored === null || stored.length === 0) return null;
  return Buffer.from(JSON.stringify(rewriteMediaUrl(stored.toString('utf8'), prefix)));
}

/** The rewrites of `rows`. Rejects with RewriteWorkerError when a worker fails the batch. */
export async function rewriteRows(rows: readonly DocumentRow[], opts: RewriteStageOptions): Promise<BatchRewrites> {
  const { prefix, pool, plans } = opts;
  const pj = jsonPrefixBytes(prefix);
  const contentHtml = new Array<ContentHtmlJson>(rows.length);
  const flagged: number[] = [];
  let bytes = 0;
  const coverUrls = rows.map((row, i) => {
    bytes += rowBytes(row);
    const text = row[DOC.contentHtml];
    // A stored plan is checked before the pre-check: its key covers the text, and a pass means no decoding.
    if (text === null || (row[DOC.plan] === null && !jsonHtmlMayNeedRewrite(text))) contentHtml[i] = text;
    else flagged.push(i);
    const cover = coverUrlJson(row[DOC.coverUrl], prefix);
    bytes += (cover?.length ?? 0) - (row[DOC.coverUrl]?.length ?? 0);
    return cover;
  });
  if (flagged.length === 0) return { coverUrls, contentHtml, bytes };
  // Set once each flagged row's splice is known: its length replaces the stored text's.
  const splice = (text: Buffer, plan: Buffer, from: number, length: number): ContentHtmlJson | null => {
    if (length < 0) return null;
    bytes += length - text.length;
    return planSplice(text, plan, pj, from);
  };
  // `plan[from…]`; a promise only when the plan's edits outlast the event-loop slice.
  const spliced = (text: Buffer, plan: Buffer, from = 0): ContentHtmlJson | null | Promise<ContentHtmlJson | null> => {
    if (plan.length === from) return text;
    const length = splicedLength(text, plan, pj, opts.pause, from);
    return typeof length === 'number' ? splice(text, plan, from, length) : length.then((n) => splice(text, plan, from, n));
  };

  const pending: Pending[] = [];
  for (let f = 0; f < flagged.length; f++) {
    const i = flagged[f]!;
    const text = rows[i]![DOC.contentHtml]!;
    const column = rows[i]![DOC.plan];
    if (plans && column !== null) {
      const stored = readStoredPlan(column);
      // A plan whose key matches but that does not fit its text was computed wrongly: tokenize, and replace it.
      let reused = stored !== null && storedPlanMatches(text, prefix, stored) ? spliced(text, stored, PLAN_KEY_BYTES) : null;
      if (reused instanceof Promise) reused = await reused;
      if (reused !== null) {
        contentHtml[i] = reused;
        plans.counts.reused++;
        continue;
      }
    }
    // Flagged for its stored plan, which did not match: the pre-check has not run yet.
    if (column !== null && !jsonHtmlMayNeedRewrite(text)) {
      contentHtml[i] = text;
      continue;
    }
    if (plans) plans.counts.computed++;
    pending.push({ row: i, text });
  }

  const planned = async (p: Pending, plan: Buffer): Promise<void> => {
    const html = await spliced(p.text, plan);
    if (html === null) throw new PlanFormatError('the rewriter made a plan that does not fit its text');
    contentHtml[p.row] = html;
    if (plans?.writer) plans.writer.offer(documentIdOf(rows[p.row]!), planKey(p.text, prefix, plan), plan);
  };
  const small: Pending[] = [];
  let smallBytes = 0;
  const large: Promise<void>[] = [];
  for (const p of pending) {
    if (p.text.length < LARGE_DOCUMENT_BYTES) {
      small.push(p);
      smallBytes += p.text.length;
    } else if (pool) {
      // Alone, so a worker never holds more than one large document of this batch.
      const done = pool.plan([p.text], prefix).then(([plan]) => planned(p, plan!));
      done.catch(() => {});
      large.push(done);
    } else {
      await planned(p, await planContentHtmlSliced(p.text, prefix, opts.pause));
    }
  }
  if (pool && small.length > 0 && smallBytes >= opts.offloadBytes) {
    const out = await pool.plan(small.map((p) => p.text), prefix);
    for (const [k, p] of small.entries()) await planned(p, out[k]!);
  } else {
    // In slices too: 1 MB of `<img src=a>` planned in one step held the event loop for 300 ms and more (D8.8).
    for (const p of small) {
      const plan = planContentHtmlSliced(p.text, prefix, opts.pause);
      await planned(p, plan instanceof Promise ? await plan : plan);
    }
  }
  await Promise.all(large);
  return { coverUrls, contentHtml, bytes };
}
