/**
 * Bodies of small exports kept in memory, so that a knowledge base exported again and again (a
 * load test, a polling indexer) costs one lookup instead of a snapshot, a cursor and the rewriter.
 *
 * Entries are keyed by book id, the book's export version and the query options. The version
 * (sql/0003_export_version_random.sql) is random and changes in the same transaction as anything
 * the export holds; equal versions promise byte-identical export data (decisions.md D9.1). A body
 * is kept under the version of the snapshot it was read from, and a request looks up the book's
 * current version first, so it is only ever served while it is byte-for-byte what a fresh snapshot
 * would give (decisions.md D6.1). Versions have no order: when one is asked for or kept, the book's
 * bodies of other versions go (were an old version to come back with a restored database, its data
 * would come back with it, so a kept body would still be right; it is just unlikely to be asked for).
 * Least recently used entries go first; the total stays within `maxBytes`, and no single body above
 * a quarter of it is kept.
 */
import type { BodyFormat } from './encode/body-format.js';

export interface ExportCacheKey {
  bookId: string;
  version: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  /** JSON when unset (decisions.md D9.4). */
  format?: BodyFormat;
}

interface Entry {
  body: Buffer;
  bookId: string;
  version: string;
}

export class ExportCache {
  private readonly entries = new Map<string, Entry>();
  /** Entry ids per book id, so that a book's other versions go once one is asked for or kept. */
  private readonly byBook = new Map<string, Set<string>>();
  private bytes = 0;
  hits = 0;
  misses = 0;

  /** @param maxBytes total bytes of kept bodies; 0 turns the cache off. */
  constructor(readonly maxBytes: number) {}

  /** Largest body kept, bytes. */
  get maxEntryBytes(): number {
    return Math.floor(this.maxBytes / 4);
  }

  /** Bytes of kept bodies. */
  get size(): number {
    return this.bytes;
  }

  private static id(k: ExportCacheKey): string {
    return `${k.bookId}\u0000${k.version}\u0000${k.excludeCategories ? 1 : 0}${k.includeContentHtml ? 1 : 0}${k.format ?? 'json'}`;
  }

  private remove(id: string, e: Entry): void {
    this.entries.delete(id);
    this.bytes -= e.body.length;
    const ids = this.byBook.get(e.bookId);
    ids?.delete(id);
    if (ids?.size === 0) this.byBook.delete(e.bookId);
  }

  /**
   * Drops the book's bodies of other versions: the version asked for (the current one when looked
   * up) or just read is the one worth the memory. Only an economy, never needed for correctness:
   * a lookup that raced a change drops the newer body, which is then read again.
   */
  private dropOtherVersions(key: ExportCacheKey): void {
    for (const id of this.byBook.get(key.bookId) ?? []) {
      const e = this.entries.get(id)!;
      if (e.version !== key.version) this.remove(id, e);
    }
  }

  /** The kept body for `key` (the book's current version, looked up first), or undefined. Counts a hit or a miss. */
  get(key: ExportCacheKey): Buffer | undefined {
    if (this.maxBytes === 0) return undefined;
    this.dropOtherVersions(key);
    const id = ExportCache.id(key);
    const e = this.entries.get(id);
    if (e === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Map order is insertion order: re-inserting makes this the most recently used.
    this.entries.delete(id);
    this.entries.set(id, e);
    return e.body;
  }

  /** Keeps `body` under `key` (the version of the snapshot it was read from) when it fits, evicting the least recently used bodies. */
  set(key: ExportCacheKey, body: Buffer): void {
    if (body.length > this.maxEntryBytes) return;
    this.dropOtherVersions(key);
    const id = ExportCache.id(key);
    const old = this.entries.get(id);
    if (old !== undefined) this.remove(id, old);
    for (const [oldest, e] of this.entries) {
      if (this.bytes + body.length <= this.maxBytes) break;
      this.remove(oldest, e);
    }
    this.entries.set(id, { body, bookId: key.bookId, version: key.version });
    let ids = this.byBook.get(key.bookId);
    if (ids === undefined) this.byBook.set(key.bookId, (ids = new Set()));
    ids.add(id);
    this.bytes += body.length;
  }
}
