/** Full collections around large documents, for the commands that load them (bench/optimisations.md says why). */
import { setImmediate } from 'node:timers/promises';

/** A page's contents (contentHtml and contentStr, UTF-16 units) from which it is large. */
export const LARGE_PAGE = 1024 * 1024;

/** V8's `gc()`, exposed by the `kb-export` executable's --expose-gc (src/cli/kb-export.ts); absent elsewhere. */
const fullCollection = (globalThis as { gc?: () => void }).gc;

/** A full collection, after queued callbacks have run (parse5's SAX parser holds its input until its next tick). */
export async function collectGarbage(): Promise<void> {
  await setImmediate();
  fullCollection?.();
}

export async function collectAroundLargePage(contentLength: number): Promise<void> {
  if (contentLength >= LARGE_PAGE) await collectGarbage();
}
