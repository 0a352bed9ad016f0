/**
 * Bodies of small exports kept in memory, so that a knowledge base exported again and again (a
 * load test, a polling indexer) costs one lookup instead of a snapshot, a cursor and the rewriter.
 *
 * Entries are keyed by book id, the book's export version (sql/0002_export_version.sql: bumped in
 * the same transaction as any change to what the export holds) and the query options. A body is
 * only ever served for the version it was read at, so it is byte-for-byte what a fresh snapshot
 * would give (decisions.md D6.1). Least recently used entries go first; the total stays within
 * `maxBytes`, and no single body above a quarter of it is kept.
 */

export interface ExportCacheKey {
  bookId: string;
  version: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
}

export class ExportCache {
  private readonly entries = new Map<string, Buffer>();
  /** Highest export version seen per book id. */
  private readonly latest = new Map<string, bigint>();
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
    return `${k.bookId}\u0000${k.version}\u0000${k.excludeCategories ? 1 : 0}${k.includeContentHtml ? 1 : 0}`;
  }

  /** The kept body for `key`, or undefined. Counts a hit or a miss. */
  get(key: ExportCacheKey): Buffer | undefined {
    if (this.maxBytes === 0) return undefined;
    const id = ExportCache.id(key);
    const body = this.entries.get(id);
    if (body === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Map order is insertion order: re-inserting makes this the most recently used.
    this.entries.delete(id);
    this.entries.set(id, body);
    return body;
  }

  /** Keeps `body` for `key` when it fits, evicting the least recently used bodies. */
  set(key: ExportCacheKey, body: Buffer): void {
    if (body.length > this.maxEntryBytes) return;
    const id = ExportCache.id(key);
    const old = this.entries.get(id);
    if (old !== undefined) {
      this.entries.delete(id);
      this.bytes -= old.length;
    }
    // Versions only grow: a body read at an older version than one already seen is stale, and
    // bodies of older versions can never be served again.
    const version = BigInt(key.version);
    const latest = this.latest.get(key.bookId);
    if (latest !== undefined && latest > version) return;
    if (latest !== undefined && latest < version) {
      const prefix = `${key.bookId}\u0000`;
      for (const [other, b] of this.entries) {
        if (other.startsWith(prefix)) {
          this.entries.delete(other);
          this.bytes -= b.length;
        }
      }
    }
    // Only an optimisation (a stale body is never asked for: requests look up the current
    // version), so the map is simply dropped when many knowledge bases were exported.
    if (this.latest.size >= 10_000) this.latest.clear();
    this.latest.set(key.bookId, version);
    for (const [oldest, b] of this.entries) {
      if (this.bytes + body.length <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.bytes -= b.length;
    }
    this.entries.set(id, body);
    this.bytes += body.length;
  }
}
