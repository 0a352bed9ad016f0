/**
 * Worker threads that rewrite contentHtml off the event loop (REWRITE_WORKERS). While a worker
 * rewrites one batch, the event loop encodes and writes the previous one and PostgreSQL sends the
 * next, so an export with HTML uses a second core. Texts travel as one transferred buffer per
 * batch each way; rows are never held by a worker beyond the batch it was given.
 */
import { Worker } from 'node:worker_threads';
import type { RewriteReply, RewriteRequest } from './rewrite-batch.js';

// Under the TypeScript loader of the tests this module is rewrite-pool.ts, and so is its worker.
const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './rewrite-worker.ts' : './rewrite-worker.js', import.meta.url);

interface Job {
  texts: readonly Buffer[];
  resolve: (out: Buffer[]) => void;
  reject: (err: Error) => void;
}

interface Slot {
  worker: Worker;
  jobs: Map<number, Job>;
}

/** Raised for every batch a worker held when it failed or stopped; the export using it aborts. */
export class RewriteWorkerError extends Error {
  override name = 'RewriteWorkerError';
}

/** A fixed number of rewrite workers; a worker that dies is replaced and its batches fail. */
export class RewritePool {
  readonly size: number;
  readonly #workerUrl: URL;
  #slots: Slot[] = [];
  #nextId = 1;
  #closed = false;

  /** `size` ≥ 1 workers, started now; `workerUrl` replaces rewrite-worker.ts (tests use a failing one). */
  constructor(size: number, options: { workerUrl?: URL } = {}) {
    this.size = size;
    this.#workerUrl = options.workerUrl ?? WORKER_URL;
    for (let i = 0; i < size; i++) this.#slots.push(this.#spawn());
  }

  #spawn(): Slot {
    const slot: Slot = { worker: new Worker(this.#workerUrl), jobs: new Map() };
    // An idle pool never keeps the process alive; a worker is referenced while it holds a batch.
    slot.worker.unref();
    slot.worker.on('message', (reply: RewriteReply) => {
      const job = slot.jobs.get(reply.id);
      if (job === undefined) return;
      this.#settled(slot, reply.id);
      if ('error' in reply) {
        job.reject(new RewriteWorkerError(`rewrite worker failed: ${reply.error}`));
        return;
      }
      const data = Buffer.from(reply.data.buffer, reply.data.byteOffset, reply.data.byteLength);
      let start = 0;
      job.resolve(
        job.texts.map((text, i) => {
          const end = reply.ends[i]!;
          const out = end === start ? text : data.subarray(start, end);
          start = end;
          return out;
        }),
      );
    });
    slot.worker.on('error', (err) => this.#retire(slot, `rewrite worker failed: ${err.message}`));
    slot.worker.on('exit', (code) => this.#retire(slot, `rewrite worker stopped (exit code ${code})`));
    return slot;
  }

  /** Fails the batches `slot` held and puts a fresh worker in its place (none once closed). */
  #retire(slot: Slot, message: string): void {
    const i = this.#slots.indexOf(slot);
    if (i >= 0) {
      // Replaced at once: a batch sent after an 'error' and before the 'exit' would be lost.
      if (this.#closed) this.#slots.splice(i, 1);
      else this.#slots[i] = this.#spawn();
      void slot.worker.terminate();
    }
    this.#fail(slot, message);
  }

  #settled(slot: Slot, id: number): void {
    slot.jobs.delete(id);
    if (slot.jobs.size === 0) slot.worker.unref();
  }

  #fail(slot: Slot, message: string): void {
    const jobs = [...slot.jobs.values()];
    slot.jobs.clear();
    slot.worker.unref();
    for (const job of jobs) job.reject(new RewriteWorkerError(message));
  }

  /**
   * The JSON texts of flagged contentHtml values (document-encoder.ts contentHtmlNeedsRewrite)
   * with their media URLs rewritten, in order; an unchanged text comes back as the same Buffer.
   * Rejects with RewriteWorkerError if the worker fails or the pool is closed.
   */
  rewrite(texts: readonly Buffer[], prefix: string): Promise<Buffer[]> {
    if (this.#closed) return Promise.reject(new RewriteWorkerError('the rewrite pool is closed'));
    let total = 0;
    for (const t of texts) total += t.length;
    const data = new Uint8Array(total);
    const ends = new Uint32Array(texts.length);
    let at = 0;
    texts.forEach((t, i) => {
      data.set(t, at);
      at += t.length;
      ends[i] = at;
    });
    let slot = this.#slots[0]!;
    for (const s of this.#slots) if (s.jobs.size < slot.jobs.size) slot = s;
    const id = this.#nextId++;
    return new Promise<Buffer[]>((resolve, reject) => {
      if (slot.jobs.size === 0) slot.worker.ref();
      slot.jobs.set(id, { texts, resolve, reject });
      slot.worker.postMessage({ id, prefix, data, ends } satisfies RewriteRequest, [data.buffer, ends.buffer]);
    });
  }

  /** Stops the workers; batches they still hold are rejected. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#slots.map((s) => s.worker.terminate()));
  }
}
