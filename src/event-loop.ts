/** Long work in slices (D8.8); an awaited resolved promise never yields (a microtask), hence `pause()`. */
import { performance } from 'node:perf_hooks';

/** Default slice, ms: well under D8.8's 50 ms, so a slice that overruns a little stays under it. */
const SLICE_MS = 15;

/** `EventLoopSlices.pause`, or a stand-in: a promise to await, or undefined to go on. */
export type Pause = () => Promise<void> | undefined;

export class EventLoopSlices {
  #since = performance.now();

  constructor(private readonly sliceMs = SLICE_MS) {}

  get due(): boolean {
    return performance.now() - this.#since >= this.sliceMs;
  }

  /** Yields once the slice has run its time; undefined before, so a loop over rows awaits nothing. */
  pause(): Promise<void> | undefined {
    if (!this.due) return undefined;
    return new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      this.#since = performance.now();
    });
  }
}
