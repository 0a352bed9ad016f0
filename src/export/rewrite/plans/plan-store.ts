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
  /** Plans waiting at most (default 10,000), and their bytes at most (default 16 MiB; one larger plan alone is taken). */
  maxQueued?: number;
  maxQueuedBytes?: number;
  /** Plans per INSERT at most (default 1,000), and their bytes at most (default 256 KiB). */
  batchSize?: number;
  batchBytes?: number;
  /** Longest wait for one INSERT, ms (default 5000): past it, plans are dropped until it settles. */
  timeoutMs?: number;
  log?: PlanWriterLog;
}

interface PlanWriterCounts {
  written: number;
  dropped: number;
  failed: number;
}

// Skips deleted documents (no foreign key checks it: sql/0012), replaces only a differing plan, locks rows in id
// order; JSON needs no array types.
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

/** The statements sent before the first answers: while the event loop is busy exporting, the connection stays busy too. */
const IN_FLIGHT = 2;

type Batch = { large: [string, StoredPlan] } | { rows: { d: string; k: string; p: string }[] };

export class PlanWriter {
  readonly counts: PlanWriterCounts = { written: 0, dropped: 0, failed: 0 };
  readonly #maxQueued: number;
  readonly #maxQueuedBytes: number;
  readonly #batchSize: number;
  readonly #batchBytes: number;
  readonly #log: PlanWriterLog | undefined;
  /** Plans waiting, by document id: a document offered twice is written once, with its last plan. */
  #queue = new Map<string, StoredPlan>();
  #queuedBytes = 0;
  #writing: Promise<void> | null = null;
  #stuck: Promise<unknown> | null = null;
  #closed = false;
  readonly #timeoutMs: number;

  constructor(
    private readonly sql: Sql,
    opts: PlanWriterOptions = {},
  ) {
    this.#maxQueued = opts.maxQueued ?? 10_000;
    this.#maxQueuedBytes = opts.maxQueuedBytes ?? 16 * 1024 * 1024;
    this.#batchSize = opts.batchSize ?? 1000;
    this.#batchBytes = opts.batchBytes ?? 256 * 1024;
    this.#timeoutMs = opts.timeoutMs ?? 5000;
    this.#log = opts.log;
  }

  /** Queues a document's plan; never waits or throws. False when dropped (queue full, a write stuck, closed). */
  offer(documentId: string, key: Buffer, plan: Buffer): boolean {
    const before = this.#queue.get(documentId);
    const bytes = this.#queuedBytes - (before ? sizeOf(before) : 0) + key.length + plan.length;
    const full = before === undefined && this.#queue.size >= this.#maxQueued;
    if (
      this.#closed ||
      this.#stuck !== null ||
      full ||
      (bytes > this.#maxQueuedBytes && this.#queue.size > (before ? 1 : 0))
    ) {
      this.counts.dropped++;
      return false;
    }
    this.#queue.set(documentId, { key, plan });
    this.#queuedBytes = bytes;
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
    const sent: Promise<void>[] = [];
    try {
      while (sent.length > 0 || (this.#queue.size > 0 && this.#stuck === null)) {
        if (sent.length < IN_FLIGHT && this.#queue.size > 0 && this.#stuck === null)
          sent.push(this.#write(this.#take()));
        else await sent.shift();
      }
    } finally {
      this.#writing = null;
    }
  }

  /** The next batch: one large plan alone, or small ones up to the batch's bounds. */
  #take(): Batch {
    const rows: { d: string; k: string; p: string }[] = [];
    let bytes = 0;
    for (const [d, stored] of this.#queue) {
      if (stored.plan.length >= LARGE_PLAN_BYTES) {
        if (rows.length > 0) continue;
        this.#remove(d, stored);
        return { large: [d, stored] };
      }
      rows.push({ d, k: stored.key.toString('base64'), p: stored.plan.toString('base64') });
      this.#remove(d, stored);
      bytes += sizeOf(stored);
      if (rows.length >= this.#batchSize || bytes >= this.#batchBytes) break;
    }
    return { rows };
  }

  #remove(documentId: string, stored: StoredPlan): void {
    this.#queue.delete(documentId);
    this.#queuedBytes -= sizeOf(stored);
  }

  /** Sends one batch and settles with its outcome counted; never rejects. */
  async #write(batch: Batch): Promise<void> {
    // One statement, never begin(): postgres.js 3.4 crashes on begin()'s ROLLBACK over a lost connection.
    const write = (
      'large' in batch
        ? this.sql.unsafe(INSERT_ONE, [
            batch.large[0],
            batch.large[1].key.toString('base64'),
            batch.large[1].plan.toString('base64'),
          ])
        : this.sql.unsafe(INSERT, [JSON.stringify(batch.rows)])
    ).execute();
    write.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new PlanWriteTimeout(this.#timeoutMs)), this.#timeoutMs);
    });
    try {
      // Not `written += await …`: that reads the count before the wait, and two batches are in flight.
      const { count } = await Promise.race([write, late]);
      this.counts.written += count;
    } catch (err) {
      let lost = 'large' in batch ? 1 : batch.rows.length;
      if (err instanceof PlanWriteTimeout) {
        lost += this.#queue.size;
        this.#queue.clear();
        this.#queuedBytes = 0;
        const stuck: Promise<unknown> = write
          .finally(() => {
            if (this.#stuck === stuck) this.#stuck = null;
          })
          .catch(() => {});
        this.#stuck = stuck;
      }
      this.counts.failed += lost;
      this.#log?.warn({ err, plans: lost }, 'rewrite plans not written (the next export computes them again)');
    } finally {
      clearTimeout(timer);
    }
  }
}

function sizeOf(stored: StoredPlan): number {
  return stored.key.length + stored.plan.length;
}
