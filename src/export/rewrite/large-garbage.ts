/**
 * Prompt collection of the garbage a large document's rewriting leaves (decisions.md D8.4).
 * Rewriting one document's contentHtml allocates a few times its size in short-lived strings
 * (the decoded JSON, the tokenizer's runs, the spliced output). V8 collects large strings only in
 * full collections, which it starts late (the server lets the heap double first:
 * --heap-growing-percent), so a run of 8 MB documents piled the garbage of several of them on top
 * of the live data. Before each large document is rewritten, the previous ones' garbage is
 * collected: a few milliseconds against the hundreds of milliseconds the rewriting itself takes.
 */
import v8 from 'node:v8';
import vm from 'node:vm';

/** A document is large when its contentHtml's JSON text has at least this many bytes. */
export const LARGE_DOCUMENT_BYTES = 1024 * 1024;

let collect: (() => void) | null | undefined;

/**
 * V8's `gc()`: the global one when Node runs with --expose-gc, otherwise obtained by turning the
 * flag on now, which V8 honours for contexts created afterwards (the new context below). Null if
 * neither works; then only V8's own heuristics apply.
 */
function fullCollection(): (() => void) | null {
  if (collect !== undefined) return collect;
  const global = (globalThis as { gc?: () => void }).gc;
  if (typeof global === 'function') return (collect = global);
  try {
    v8.setFlagsFromString('--expose-gc');
    const fn = vm.runInNewContext('gc') as unknown;
    collect = typeof fn === 'function' ? (fn as () => void) : null;
  } catch {
    collect = null;
  }
  return collect;
}

/** Called before a document of `bytes` is rewritten: collects the garbage of earlier large ones first. */
export function noteRewritten(bytes: number): void {
  if (bytes >= LARGE_DOCUMENT_BYTES) fullCollection()?.();
}
