/** Long work in slices (D8.8); an awaited resolved promise never yields (a microtask), hence `pause()`. */
import { performance } from 'node:perf_hooks';

/** Default slice, ms: well under D8.8's 50 ms, so a slice that overruns a little stays under it. */
const SLICE_MS = 15;

export class EventLoopSlices {
  #since = performance.now();

  constructor(private readonly sliceMs = SLICE_MS) {}

  get due(): boolean {
    return performance.now() - this.#since >= this.sliceMs;
  }

  async pause(): Promise<void> {
    if (!this.due) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.#since = performance.now();
  }
}
