/** Full collections around large documents, for the commands that load them (bench/optimisations.md says why). */
import { setImmediate } from 'node:timers/promises';
import { fullCollection } from '../buffer-garbage.js';

/** A page's contents (contentHtml and contentStr, UTF-16 units) from which it is large. */
export const LARGE_PAGE = 1024 * 1024;

/** A full collection, after queued callbacks have run (parse5's SAX parser holds its input until its next tick). */
export async function collectGarbage(): Promise<void> {
  await setImmediate();
  fullCollection?.();
}

export async function collectAroundLargePage(contentLength: number): Promise<void> {
  if (contentLength >= LARGE_PAGE) await collectGarbage();
}
