/**
 * Stored rewrite plans (sql/0005_rewrite_plans.sql, rewrite-plan.ts): reading the plan the export
 * cursor returns with each row, and writing new plans behind the exports.
 *
 * Writes never touch an export: exports offer plans to a bounded queue that drops what does not
 * fit rather than wait, and one writer sends them in batches on a connection of its own (the
 * export's transaction stays READ ONLY). A failed write is logged and dropped: plans are an
 * optimisation, and the next export computes them again.
 */
import type { Sql } from '../../db/connect.js';
import { PLAN_KEY_BYTES } from './rewrite-plan.js';

/** A plan as stored: its key (rewrite-plan.ts planKey) and the plan. */
interface StoredPlan {
  key: Buffer;
  plan: Buffer;
}

/**
 * The stored plan of a row from the plan column of the cursor (query.ts: `plan_key || plan` as
 * bytea in PostgreSQL's hex text form, `\x…`), or null for a row without one or a value that is
 * not such a text.
 */
export function readStoredPlan(column: Buffer | null): StoredPlan | null {
  if (column === null || column.length < 2 + 2 * PLAN_KEY_BYTES || column[0] !== 0x5c || column[1] !== 0x78) return null;
  const bytes = Buffer.from(column.toString('latin1', 2), 'hex');
  if (bytes.length !== (column.length - 2) / 2) return null;
  return { key: bytes.subarray(0, PLAN_KEY_BYTES), plan: bytes.subarray(PLAN_KEY_BYTES) };
}

/** The writer's log: warnings when a write fails (pino's shape). */
interface PlanWriterLog {
  warn(obj: object, msg: string): void;
}

interface PlanWriterOptions {
  /** Plans waiting to be written at most; more are dropped (default 10,000, a few MB at most). */
  maxQueued?: number;
  /** Plans per INSERT (default 500). */
  batchSize?: number;
  /**
   * Longest wait for one INSERT, ms (default 5000): past it the batch and every plan queued behind
   * it count as failed, and plans are dropped until the INSERT settles, so a frozen link neither
   * holds plans in memory nor holds up the app's close.
   */
  timeoutMs?: number;
  log?: PlanWriterLog;
}

/** Counts of what became of the plans offered, for metrics (observe/metrics.ts). */
interface PlanWriterCounts {
  /** Plans written (inserted, or replacing one with another key). */
  written: number;
  /** Plans dropped because the queue was full. */
  dropped: number;
  /** Plans lost with a write that failed. */
  failed: number;
}

/**
 * One INSERT of a batch: documents deleted meanwhile are skipped (no foreign-key error), and a
 * stored plan is replaced only when the new one differs (another key, or the same key with
 * another plan: a stored plan found corrupt, html-stage.ts). Rows come sorted by document id, so
 * two writers lock the same rows in the same order. JSON carries the batch, so the connection
 * needs no array types (db/connect.ts fetchTypes).
 */
const INSERT = `
  INSERT INTO rewrite_plans (document_id, plan_key, plan)
  SELECT p.d, decode(p.k, 'base64'), decode(p.p, 'base64')
  FROM json_to_recordset($1::text::json) AS p(d text, k text, p text)
  WHERE EXISTS (SELECT 1 FROM documents WHERE documents.id = p.d)
  ORDER BY p.d
  ON CONFLICT (document_id) DO UPDATE SET plan_key = excluded.plan_key, plan = excluded.plan
  WHERE (rewrite_plans.plan_key, rewrite_plans.plan) IS DISTINCT FROM (excluded.plan_key, excluded.plan)`;

/** An INSERT of plans that did not answer in time. */
class PlanWriteTimeout extends Error {
  override name = 'PlanWriteTimeout';
  constructor(ms: number) {
    super(`no answer from the database within ${ms} ms`);
  }
}

/** Writes plans behind the exports, on its own connection pool (`sql`). */
export class PlanWriter {
  readonly counts: PlanWriterCounts = { written: 0, dropped: 0, failed: 0 };
  readonly #maxQueued: number;
  readonly #batchSize: number;
  readonly #log: PlanWriterLog | undefined;
  /** Plans waiting, by document id: a document offered twice is written once, with its last plan. */
  #queue = new Map<string, StoredPlan>();
  #writing: Promise<void> | null = null;
  /** An INSERT that outlived timeoutMs and has not settled yet. */
  #stuck: Promise<unknown> | null = null;
  #closed = false;
  readonly #timeoutMs: number;

  constructor(
    private readonly sql: Sql,
    opts: PlanWriterOptions = {},
  ) {
    this.#maxQueued = opts.maxQueued ?? 10_000;
    this.#batchSize = opts.batchSize ?? 500;
    this.#timeoutMs = opts.timeoutMs ?? 5000;
    this.#log = opts.log;
  }

  /**
   * Queues the plan of document `documentId` (its id as stored) for writing; never waits and
   * never throws. False when it was dropped: the queue is full, a write is stuck (timeoutMs), or
   * the writer is closed.
   */
  offer(documentId: string, key: Buffer, plan: Buffer): boolean {
    if (this.#closed || this.#stuck !== null || (this.#queue.size >= this.#maxQueued && !this.#queue.has(documentId))) {
      this.counts.dropped++;
      return false;
    }
    this.#queue.set(documentId, { key, plan });
    this.#writing ??= this.#writeAll();
    return true;
  }

  /** Resolves once every plan queued so far was written or given up (at most timeoutMs per batch). */
  async drain(): Promise<void> {
    while (this.#writing !== null) await this.#writing;
  }

  /** Writes what is queued, then takes no more plans. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.drain();
  }

  async #writeAll(): Promise<void> {
    // Let the export that offered this plan offer the rest of its batch first.
    await new Promise((resolve) => setImmediate(resolve));
    try {
      while (this.#queue.size > 0) {
        const batch: { d: string; k: string; p: string }[] = [];
        for (const [d, { key, plan }] of this.#queue) {
          batch.push({ d, k: key.toString('base64'), p: plan.toString('base64') });
          this.#queue.delete(d);
          if (batch.length >= this.#batchSize) break;
        }
        // One statement, never begin(): postgres.js 3.4 crashes the process when begin() sends
        // ROLLBACK on a connection that was lost (db/transaction.ts), and a single INSERT needs none.
        const write = this.sql.unsafe(INSERT, [JSON.stringify(batch)]).execute();
        write.catch(() => {});
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new PlanWriteTimeout(this.#timeoutMs)), this.#timeoutMs);
        });
        try {
          this.counts.written += (await Promise.race([write, late])).count;
        } catch (err) {
          let lost = batch.length;
          if (err instanceof PlanWriteTimeout) {
            lost += this.#queue.size;
            this.#queue.clear();
            this.#stuck = write.finally(() => (this.#stuck = null)).catch(() => {});
          }
          this.counts.failed += lost;
          this.#log?.warn({ err, plans: lost }, 'rewrite plans not written (the next export computes them again)');
        } finally {
          clearTimeout(timer);
        }
      }
    } finally {
      this.#writing = null;
    }
  }
}
