/** The rewrite stage (D3): stored HTML kept, or a stored plan spliced, or planned on a worker or in slices (D8.8). */
import { PlanFormatError } from '../../errors.js';
import type { BatchRewrites, ContentHtmlJson } from './rewrites.js';
import { DOC, documentIdOf, rowBytes, type DocumentRow } from '../snapshot/rows.js';
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

/**
 * Documents to plan that send a batch to the pool whatever their bytes: each costs a parser of its
 * own, so a thousand small ones (a note with one image each) are more work than their bytes say.
 */
export const OFFLOAD_DOCUMENTS = 64;

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

/** `cover.url`'s JSON text as exported (D3.6), or null when there is no cover (D2.4). */
function coverUrlJson(stored: Buffer | null, prefix: string): Buffer | null {
  if (stored === null || stored.length === 0) return null;
  return Buffer.from(JSON.stringify(rewriteMediaUrl(stored.toString('utf8'), prefix)));
}

/** The rewrites of `rows`. Rejects with RewriteWorkerError when a worker fails the batch. */
export async function rewriteRows(rows: readonly DocumentRow[], opts: RewriteStageOptions): Promise<BatchRewrites> {
  const batch = new BatchRewrite(rows, opts);
  const flagged = batch.passThrough();
  if (flagged.length === 0) return batch.result();
  const pending = await batch.reuseStored(flagged);
  if (pending.length > 0) await batch.plan(pending);
  return batch.result();
}

/** One batch's rewrites as they are worked out, in three steps: pass-through, stored plans, planning. */
class BatchRewrite {
  readonly #contentHtml: ContentHtmlJson[];
  #coverUrls: (Buffer | null)[] = [];
  /** The rows' bytes, each text's replaced by its splice's once that is known. */
  #bytes = 0;
  /** The prefix's JSON bytes, as plans splice them in. */
  readonly #prefixJson: Buffer;

  constructor(
    private readonly rows: readonly DocumentRow[],
    private readonly opts: RewriteStageOptions,
  ) {
    this.#contentHtml = new Array<ContentHtmlJson>(rows.length);
    this.#prefixJson = jsonPrefixBytes(opts.prefix);
  }

  result(): BatchRewrites {
    return { coverUrls: this.#coverUrls, contentHtml: this.#contentHtml, bytes: this.#bytes };
  }

  /**
   * Every row's cover.url, and its contentHtml as stored when it needs no rewrite; returns the rows
   * left: flagged by the pre-check, or with a stored plan, which is checked before the pre-check (its
   * key covers the text, and a match means no decoding).
   */
  passThrough(): number[] {
    const { rows, opts } = this;
    const flagged: number[] = [];
    this.#coverUrls = rows.map((row, i) => {
      this.#bytes += rowBytes(row);
      const text = row[DOC.contentHtml];
      if (text === null || (row[DOC.plan] === null && !jsonHtmlMayNeedRewrite(text))) this.#contentHtml[i] = text;
      else flagged.push(i);
      const cover = coverUrlJson(row[DOC.coverUrl], opts.prefix);
      this.#bytes += (cover?.length ?? 0) - (row[DOC.coverUrl]?.length ?? 0);
      return cover;
    });
    return flagged;
  }

  /** Splices the `flagged` rows whose stored plan matches their text; returns the ones still to plan. */
  async reuseStored(flagged: readonly number[]): Promise<Pending[]> {
    const { rows, opts } = this;
    const plans = opts.plans;
    const pending: Pending[] = [];
    for (let f = 0; f < flagged.length; f++) {
      const i = flagged[f]!;
      const text = rows[i]![DOC.contentHtml]!;
      const column = rows[i]![DOC.plan];
      if (plans && column !== null) {
        const stored = readStoredPlan(column);
        // A plan whose key matches but that does not fit its text was computed wrongly: tokenize, and replace it.
        let reused =
          stored !== null && storedPlanMatches(text, opts.prefix, stored)
            ? this.#spliced(text, stored, PLAN_KEY_BYTES)
            : null;
        if (reused instanceof Promise) reused = await reused;
        if (reused !== null) {
          this.#contentHtml[i] = reused;
          plans.counts.reused++;
          continue;
        }
      }
      // Flagged for its stored plan, which did not match: the pre-check has not run yet.
      if (column !== null && !jsonHtmlMayNeedRewrite(text)) {
        this.#contentHtml[i] = text;
        continue;
      }
      if (plans) plans.counts.computed++;
      pending.push({ row: i, text });
    }
    return pending;
  }

  /**
   * Plans `pending`: a large document alone, on a worker or in slices; the small ones together on a
   * worker once they reach offloadBytes or OFFLOAD_DOCUMENTS, else in slices on the event loop.
   */
  async plan(pending: readonly Pending[]): Promise<void> {
    const { pool, prefix, pause, offloadBytes } = this.opts;
    const small: Pending[] = [];
    let smallBytes = 0;
    const large: Promise<void>[] = [];
    for (const p of pending) {
      if (p.text.length < LARGE_DOCUMENT_BYTES) {
        small.push(p);
        smallBytes += p.text.length;
      } else if (pool) {
        // Alone, so a worker never holds more than one large document of this batch.
        const done = pool.plan([p.text], prefix).then(([plan]) => this.#planned(p, plan!));
        done.catch(() => {});
        large.push(done);
      } else {
        await this.#planned(p, await planContentHtmlSliced(p.text, prefix, pause));
      }
    }
    if (pool && small.length > 0 && (smallBytes >= offloadBytes || small.length >= OFFLOAD_DOCUMENTS)) {
      const out = await pool.plan(
        small.map((p) => p.text),
        prefix,
      );
      for (const [k, p] of small.entries()) await this.#planned(p, out[k]!);
    } else {
      // In slices too: 1 MB of `<img src=a>` planned in one step held the event loop for 300 ms and more (D8.8).
      for (const p of small) {
        const plan = planContentHtmlSliced(p.text, prefix, pause);
        await this.#planned(p, plan instanceof Promise ? await plan : plan);
      }
    }
    await Promise.all(large);
  }

  /** A new plan applied, and offered to the plan writer. */
  async #planned(p: Pending, plan: Buffer): Promise<void> {
    const html = await this.#spliced(p.text, plan);
    if (html === null) throw new PlanFormatError('the rewriter made a plan that does not fit its text');
    this.#contentHtml[p.row] = html;
    const writer = this.opts.plans?.writer;
    if (writer) writer.offer(documentIdOf(this.rows[p.row]!), planKey(p.text, this.opts.prefix, plan), plan);
  }

  /** `plan[from…]` applied to `text`, null when it does not fit; a promise only when its edits outlast the event-loop slice. */
  #spliced(text: Buffer, plan: Buffer, from = 0): ContentHtmlJson | null | Promise<ContentHtmlJson | null> {
    if (plan.length === from) return text;
    const length = splicedLength(text, plan, this.#prefixJson, this.opts.pause, from);
    return typeof length === 'number'
      ? this.#splice(text, plan, from, length)
      : length.then((n) => this.#splice(text, plan, from, n));
  }

  /** Once a splice's length is known, it replaces the stored text's in the batch's bytes. */
  #splice(text: Buffer, plan: Buffer, from: number, length: number): ContentHtmlJson | null {
    if (length < 0) return null;
    this.#bytes += length - text.length;
    return planSplice(text, plan, this.#prefixJson, from);
  }
}
