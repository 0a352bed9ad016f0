/**
 * HTML to Markdown off the event loop, within a budget: a page larger than `maxBytes` is not given
 * to the converter at all, and one that takes longer than `timeoutMs` or more heap than `heapMb`
 * ends its worker (terminated, started again for the next page). Either way the caller gets why,
 * and keeps the page's HTML (the fallback), so no page can stall or sink a run.
 */
import { Worker } from 'node:worker_threads';

/** A page's Markdown, or why it keeps its HTML. */
export type Converted = { ok: true; markdown: string } | { ok: false; why: string };

export interface ConvertBudget {
  /** contentHtml larger than this (UTF-16 code units, about bytes for markup) is not converted. */
  maxBytes: number;
  /** The longest one page may take, milliseconds. */
  timeoutMs: number;
  /** Each worker's old-generation heap, megabytes. */
  heapMb: number;
}

/** The defaults: pages of 2 MB convert in well under a second on this project's CI machine. */
export const DEFAULT_BUDGET: ConvertBudget = { maxBytes: 2_000_000, timeoutMs: 10_000, heapMb: 512 };

const WORKER_URL = new URL('./convert-worker.js', import.meta.url);
const START_TIMEOUT_MS = 30_000;

interface Slot {
  worker: Worker | null;
  busy: boolean;
}

/** `size` workers, each converting one page at a time. */
export class ConvertPool {
  private readonly slots: Slot[];
  private readonly waiting: (() => void)[] = [];
  private nextId = 0;

  constructor(
    size: number,
    private readonly budget: ConvertBudget = DEFAULT_BUDGET,
  ) {
    this.slots = Array.from({ length: Math.max(1, size) }, () => ({ worker: null, busy: false }));
  }

  /** Converts `html`, its `<a href>` values that are keys of `hrefs` replaced by theirs; never rejects. */
  async convert(html: string, hrefs: ReadonlyMap<string, string> = new Map()): Promise<Converted> {
    if (html.length > this.budget.maxBytes)
      return { ok: false, why: `${html.length} characters of HTML, over the budget of ${this.budget.maxBytes}` };
    const slot = await this.take();
    try {
      return await this.run(slot, html, hrefs);
    } finally {
      slot.busy = false;
      this.waiting.shift()?.();
    }
  }

  private async take(): Promise<Slot> {
    for (;;) {
      const free = this.slots.find((s) => !s.busy);
      if (free !== undefined) {
        free.busy = true;
        return free;
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
  }

  /** The slot's worker, started and loaded: a page's time budget does not pay for loading the converter. */
  private async ready(slot: Slot): Promise<Worker | string> {
    if (slot.worker !== null) return slot.worker;
    const worker = new Worker(WORKER_URL, { resourceLimits: { maxOldGenerationSizeMb: this.budget.heapMb } });
    const why = await new Promise<string | null>((resolve) => {
      const onMessage = () => settle(null);
      const onError = (err: Error) => settle(`the converter could not start: ${err.message}`);
      const onExit = () => settle('the converter could not start');
      const timer = setTimeout(
        () => settle(`the converter did not start within ${START_TIMEOUT_MS} ms`),
        START_TIMEOUT_MS,
      );
      const settle = (v: string | null) => {
        clearTimeout(timer);
        worker.off('message', onMessage).off('error', onError).off('exit', onExit);
        resolve(v);
      };
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    });
    if (why !== null) {
      void worker.terminate();
      return why;
    }
    slot.worker = worker;
    return worker;
  }

  private async run(slot: Slot, html: string, hrefs: ReadonlyMap<string, string>): Promise<Converted> {
    const worker = await this.ready(slot);
    if (typeof worker === 'string') return { ok: false, why: worker };
    const id = this.nextId++;
    return new Promise<Converted>((resolve) => {
      const done = (r: Converted, kill: boolean) => {
        clearTimeout(timer);
        worker.off('message', onMessage).off('error', onError).off('exit', onExit);
        if (kill) {
          slot.worker = null;
          void worker.terminate();
        }
        resolve(r);
      };
      const onMessage = (m: { id: number; markdown?: string; error?: string }) => {
        if (m.id !== id) return;
        done(
          m.markdown !== undefined ? { ok: true, markdown: m.markdown } : { ok: false, why: m.error ?? 'failed' },
          false,
        );
      };
      const onError = (err: Error) => done({ ok: false, why: `the converter failed: ${err.message}` }, true);
      const onExit = () => done({ ok: false, why: 'the converter stopped' }, true);
      const timer = setTimeout(
        () => done({ ok: false, why: `the converter took longer than ${this.budget.timeoutMs} ms` }, true),
        this.budget.timeoutMs,
      );
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
      worker.postMessage({ id, html, hrefs: [...hrefs] });
    });
  }

  /** Ends every worker. */
  async close(): Promise<void> {
    await Promise.all(this.slots.map((s) => s.worker?.terminate()));
    for (const s of this.slots) s.worker = null;
  }
}
