/**
 * A full collection once the Buffers made since the last one pass a bound, for the export's batches.
 * An export makes about three times its bytes in Buffers that die soon after, which V8 counts only
 * by its external-memory limit; busy with its own CPU, the export let them pile up past scenario 2's
 * 150 MB. The bound is on growth, so Buffers in flight never make it collect after every batch, and
 * per export streaming, since each collection is atomic and grows with the heap (D8.4, D8.8;
 * measurements in bench/RESULTS.md, sixth round).
 */

import v8 from 'node:v8';

/** Growth of `arrayBuffers` since the last collection that starts one, per export streaming, bytes (bench/optimisations.md). */
export const BUFFER_GROWTH_BYTES = 24 * 1024 * 1024;

export interface BufferGarbageOptions {
  /** A full collection (V8's `gc`); none: the check does nothing. */
  collect?: (() => void) | undefined;
  /** Bytes of ArrayBuffers alive or not yet collected now (default: externalBytes). */
  arrayBuffers?: () => number;
  growthBytes?: number;
}

/** V8's `gc()`, exposed by the `kb-export` executable's --expose-gc (src/cli/kb-export.ts); absent elsewhere. */
export const fullCollection = (globalThis as { gc?: () => void }).gc;

/**
 * Bytes V8 counts outside its heap, bytes: the ArrayBuffers' backing stores and the little else
 * that reports itself, so its growth is theirs. Not process.memoryUsage().arrayBuffers: that reads
 * the RSS too, 0.2 ms a call in a busy server, about 6 % of its CPU over a million small documents
 * (bench/optimisations.md).
 */
export const externalBytes = (): number => v8.getHeapStatistics().external_memory;

export class BufferGarbage {
  readonly #collect: (() => void) | undefined;
  readonly #arrayBuffers: () => number;
  readonly #growthBytes: number;
  /** `arrayBuffers` after the last collection, or the lowest seen since: V8 collects on its own too. */
  #base = -1;
  #collections = 0;
  #exports = 0;

  constructor(opts: BufferGarbageOptions = {}) {
    this.#collect = 'collect' in opts ? opts.collect : fullCollection;
    this.#arrayBuffers = opts.arrayBuffers ?? externalBytes;
    this.#growthBytes = opts.growthBytes ?? BUFFER_GROWTH_BYTES;
  }

  /** Collections this object started. */
  get collections(): number {
    return this.#collections;
  }

  /** An export starts streaming; call the function returned once it has ended, whatever the outcome. */
  streaming(): () => void {
    this.#exports++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#exports--;
    };
  }

  /**
   * Call after a batch is written: collects, synchronously (a few ms for one export), once the
   * Buffers grew by the bound times the exports streaming (at least one).
   */
  check(): void {
    if (this.#collect === undefined) return;
    const now = this.#arrayBuffers();
    if (this.#base < 0 || now < this.#base) this.#base = now;
    if (now - this.#base < this.#growthBytes * Math.max(1, this.#exports)) return;
    this.#collect();
    this.#collections++;
    this.#base = this.#arrayBuffers();
  }
}

/** The process's one instance: the growth is the process's, whichever export made it. */
export const bufferGarbage = new BufferGarbage();
