/** Stored rewrite plans: read with each row in the snapshot, written behind the exports (dropped, never waited for, when behind). */
import type { Sql } from '../../../db/connect.js';
import { PLAN_KEY_BYTES } from './rewrite-plan.js';

export interface StoredPlan {
  key: Buffer;
  plan: Buffer;
}

const HEX = new Int8Array(256).fill(-1);
for (let d = 0; d < 16; d++) {
  HEX['0123456789abcdef'.charCodeAt(d)] = d;
  HEX['0123456789ABCDEF'.charCodeAt(d)] = d;
}

/**
 * A stored plan as the export's cursor reads it (snapshot/query.ts: bytea's text format, `\x` and
 * two hex digits a byte), read without a string per row: its key's PLAN_KEY_BYTES, then the plan,
 * in one Buffer (no views: a warm export reads one per document). Null when none or malformed.
 */
export function readStoredPlan(column: Buffer | null): Buffer | null {
  if (column === null || column.length < 2 + 2 * PLAN_KEY_BYTES || column.length % 2 !== 0) return null;
  if (column[0] !== 0x5c || column[1] !== 0x78) return null;
  const bytes = Buffer.allocUnsafe((column.length - 2) / 2);
  for (let i = 0, at = 2; i < bytes.length; i++, at += 2) {
    const hi = HEX[column[at]!]!;
    const lo = HEX[column[at + 1]!]!;
    if (hi < 0 || lo < 0) return null;
    bytes[i] = (hi << 4) | lo;
  }
  return bytes;
}

interface PlanWriterLog {
  warn(obj: object, msg: string): void;
}

interface PlanWriterOptions {
  maxQueued?: number;
  batchSize?: number;
  /** Longest wait for one INSERT, ms (default 5000): past it, plans are dropped until it settles. */
  timeoutMs?: number;
  log?: PlanWriterLog;
}

interface PlanWriterCounts {
  written: number;
  dropped: number;
  failed: number;
}

// Skips deleted documents, replaces only a differing plan, locks rows in id order; JSON needs no array types.
const INSERT = `
  INSERT INTO rewrite_plans (document_id, plan_key, plan)
  SELECT p.d, decode(p.k, 'base64'), decode(p.p, 'base64')
  FROM json_to_recordset($1::text::json) AS p(d text, k text, p text)
  WHERE EXISTS (SELECT 1 FROM documents WHERE documents.id = p.d)
  ORDER BY p.d
  ON CONFLICT (document_id) DO UPDATE SET plan_key = excluded.plan_key, plan = excluded.plan
  WHERE (rewrite_plans.plan_key, rewrite_plans.plan) IS DISTINCT FROM (excluded.plan_key, excluded.plan)`;

/** One large plan: passed as base64 text alone, never copied into a JSON text beside others. */
const INSERT_ONE = `
  INSERT INTO rewrite_plans (document_id, plan_key, plan)
  SELECT $1, decode($2, 'base64'), decode($3, 'base64')
  WHERE EXISTS (SELECT 1 FROM documents WHERE documents.id = $1)
  ON CONFLICT (document_id) DO UPDATE SET plan_key = excluded.plan_key, plan = excluded.plan
  WHERE (rewrite_plans.plan_key, rewrite_plans.plan) IS DISTINCT FROM (excluded.plan_key, excluded.plan)`;

const LARGE_PLAN_BYTES = 64 * 1024;

class PlanWriteTimeout extends Error {
  override name = 'PlanWriteTimeout';
  constructor(ms: number) {
    super(`no answer from the database within ${ms} ms`);
  }
}

export class PlanWriter {
  readonly counts: PlanWriterCounts = { written: 0, dropped: 0, failed: 0 };
  readonly #maxQueued: number;
  readonly #batchSize: number;
  readonly #log: PlanWriterLog | undefined;
  /** Plans waiting, by document id: a document offered twice is written once, with its last plan. */
  #queue = new Map<string, StoredPlan>();
  #writing: Promise<void> | null = null;
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

  /** Queues a document's plan; never waits or throws. False when dropped (queue full, a write stuck, closed). */
  offer(documentId: string, key: Buffer, plan: Buffer): boolean {
    if (this.#closed || this.#stuck !== null || (this.#queue.size >= this.#maxQueued && !this.#queue.has(documentId))) {
      this.counts.dropped++;
      return false;
    }
    this.#queue.set(documentId, { key, plan });
    this.#writing ??= this.#writeAll();
    return true;
  }

  async drain(): Promise<void> {
    while (this.#writing !== null) await this.#writing;
  }

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
        let large: [string, StoredPlan] | undefined;
        for (const [d, stored] of this.#queue) {
          if (stored.plan.length >= LARGE_PLAN_BYTES) {
            if (batch.length > 0) continue;
            large = [d, stored];
            this.#queue.delete(d);
            break;
          }
          batch.push({ d, k: stored.key.toString('base64'), p: stored.plan.toString('base64') });
          this.#queue.delete(d);
          if (batch.length >= this.#batchSize) break;
        }
        // One statement, never begin(): postgres.js 3.4 crashes on begin()'s ROLLBACK over a lost connection.
        const write = (
          large
            ? this.sql.unsafe(INSERT_ONE, [large[0], large[1].key.toString('base64'), large[1].plan.toString('base64')])
            : this.sql.unsafe(INSERT, [JSON.stringify(batch)])
        ).execute();
        write.catch(() => {});
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new PlanWriteTimeout(this.#timeoutMs)), this.#timeoutMs);
        });
        try {
          this.counts.written += (await Promise.race([write, late])).count;
        } catch (err) {
          let lost = large ? 1 : batch.length;
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
