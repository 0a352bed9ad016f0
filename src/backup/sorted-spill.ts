/**
 * Records sorted and deduplicated in bounded memory, for the media URLs of an export, which may
 * number millions (media-backup.ts, verify-command.ts). Records are kept in memory up to a run's
 * bound (RUN_RECORDS records or RUN_CHARS characters), sorted and deduplicated there, and written
 * as a run file of JSON lines under a temporary folder of the system's (TMPDIR); reading them back
 * merges the runs, at most FAN_IN open at once, and drops the duplicates between runs. So what
 * bounds memory is one run, not the number of distinct records, and an export of a few thousand
 * media never touches the disk.
 */
import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

/** Most records a run holds in memory. */
const RUN_RECORDS = 50_000;
/** Most characters (of their JSON text) the records of a run hold in memory: about 16 MB. */
const RUN_CHARS = 8 * 1024 * 1024;
/** Most runs merged at once; more are merged into one run first. */
const FAN_IN = 64;

interface SpillOrder<T> {
  /** A total order: negative when `a` comes first. */
  compare(a: T, b: T): number;
  /** Whether `b`, which comes right after `a`, duplicates it: only the first is kept. */
  same(a: T, b: T): boolean;
  /** Bounds of a run, for the tests; the defaults otherwise. */
  runRecords?: number;
  runChars?: number;
}

/** A binary min-heap of the runs' next records. */
class Heads<T> {
  private readonly items: { record: T; from: number }[] = [];
  constructor(private readonly compare: (a: T, b: T) => number) {}

  get size(): number {
    return this.items.length;
  }

  push(record: T, from: number): void {
    const items = this.items;
    items.push({ record, from });
    let i = items.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (this.less(up, i)) break;
      [items[up], items[i]] = [items[i]!, items[up]!];
      i = up;
    }
  }

  pop(): { record: T; from: number } {
    const items = this.items;
    const top = items[0]!;
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let min = i;
        if (l < items.length && this.less(l, min)) min = l;
        if (r < items.length && this.less(r, min)) min = r;
        if (min === i) break;
        [items[min], items[i]] = [items[i]!, items[min]!];
        i = min;
      }
    }
    return top;
  }

  // Ties go to the earlier run, whose records were added first.
  private less(a: number, b: number): boolean {
    const c = this.compare(this.items[a]!.record, this.items[b]!.record);
    return c < 0 || (c === 0 && this.items[a]!.from < this.items[b]!.from);
  }
}

/**
 * Add records with `add`, then read them once with `sorted()`, in order without duplicates;
 * `close()` removes the run files (also after a failure). Records must survive JSON.stringify.
 */
export class SortedSpill<T> {
  private buffer: T[] = [];
  private chars = 0;
  private runs: string[] = [];
  private dir: string | null = null;
  private readonly runRecords: number;
  private readonly runChars: number;

  constructor(private readonly order: SpillOrder<T>) {
    this.runRecords = order.runRecords ?? RUN_RECORDS;
    this.runChars = order.runChars ?? RUN_CHARS;
  }

  /** The folder of the run files, once one was written (null while everything fits in memory, and after close). */
  get folder(): string | null {
    return this.dir;
  }

  /** Adds a record; may write a run. Rejects with the file system's error. */
  async add(record: T, chars: number): Promise<void> {
    this.buffer.push(record);
    this.chars += chars;
    if (this.buffer.length >= this.runRecords || this.chars >= this.runChars) await this.spill();
  }

  /** Every record added, in order, the first of each group of duplicates only. */
  async *sorted(): AsyncGenerator<T> {
    if (this.runs.length === 0) {
      yield* this.sortedBuffer();
      return;
    }
    if (this.buffer.length > 0) await this.spill();
    yield* this.merged(this.runs);
  }

  /** Removes the run files. Never throws. */
  async close(): Promise<void> {
    if (this.dir !== null) await rm(this.dir, { recursive: true, force: true }).catch(() => {});
    this.dir = null;
  }

  private sortedBuffer(): T[] {
    const records = this.buffer.sort((a, b) => this.order.compare(a, b));
    this.buffer = [];
    this.chars = 0;
    const kept: T[] = [];
    for (const r of records) if (kept.length === 0 || !this.order.same(kept[kept.length - 1]!, r)) kept.push(r);
    return kept;
  }

  private async spill(): Promise<void> {
    this.runs.push(await this.writeRun(this.sortedBuffer()));
    // Runs are merged FAN_IN at a time, so no more are ever open at once.
    if (this.runs.length >= FAN_IN) {
      const merged = await this.writeRun(this.merged(this.runs));
      await Promise.all(this.runs.map((f) => rm(f, { force: true })));
      this.runs = [merged];
    }
  }

  private async writeRun(records: Iterable<T> | AsyncIterable<T>): Promise<string> {
    this.dir ??= await mkdtemp(path.join(os.tmpdir(), 'kb-export-spill-'));
    const file = path.join(
      this.dir,
      `run-${this.runs.length}-${Date.now()}-${Math.random().toString(36).slice(2)}.jsonl`,
    );
    const out = createWriteStream(file, { flags: 'wx', mode: 0o600 });
    const failed = once(out, 'error').then(([err]) => Promise.reject(err as Error));
    failed.catch(() => {});
    let text = '';
    for await (const r of records) {
      text += `${JSON.stringify(r)}\n`;
      if (text.length >= 64 * 1024) {
        if (!out.write(text)) await Promise.race([once(out, 'drain'), failed]);
        text = '';
      }
    }
    out.end(text);
    await Promise.race([once(out, 'finish'), failed]);
    return file;
  }

  private async *merged(files: string[]): AsyncGenerator<T> {
    const inputs = files.map((f) => createReadStream(f));
    const readers = inputs.map((input) => createInterface({ input, crlfDelay: Infinity })[Symbol.asyncIterator]());
    try {
      const heads = new Heads<T>((a, b) => this.order.compare(a, b));
      const next = async (i: number) => {
        const line = await readers[i]!.next();
        if (!line.done) heads.push(JSON.parse(line.value) as T, i);
      };
      await Promise.all(readers.map((_, i) => next(i)));
      let last: { record: T } | null = null;
      while (heads.size > 0) {
        const { record, from } = heads.pop();
        if (last === null || !this.order.same(last.record, record)) {
          last = { record };
          yield record;
        }
        await next(from);
      }
    } finally {
      await Promise.all(readers.map((r) => r.return?.()));
      for (const input of inputs) input.destroy();
    }
  }
}
