/** Bodies of small exports kept in memory, served only while a fresh snapshot would match them (D6.1, D9.1). */
import type { BookLookup } from '../request/book.js';
import type { ExportRequest } from '../request/export-request.js';
import type { BodyFormat } from '../request/negotiate.js';

export interface ExportCacheKey {
  bookId: string;
  version: string;
  /** The change tokens' floor when the book was looked up: a body kept under another carries a token that may be refused. */
  tokenFloor: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  format?: BodyFormat;
}

/** A kept body and the change token of the snapshot it was read from (D12.1). */
export interface Kept {
  body: Buffer;
  token: string;
}

interface Entry extends Kept {
  bookId: string;
  version: string;
  keptAtMs: number;
}

/**
 * How long a body is served again, ms: far below the shortest CHANGE_RETENTION_DAYS (1), so the
 * token it carries is never one a delta request would refuse as too old (D12.3).
 */
export const KEEP_MS = 60 * 60 * 1000;

export class ExportCache {
  private readonly entries = new Map<string, Entry>();
  private readonly byBook = new Map<string, Set<string>>();
  private bytes = 0;
  hits = 0;
  misses = 0;

  /**
   * @param maxBytes total bytes of kept bodies; 0 turns the cache off.
   * @param now the clock entries age by, ms.
   */
  constructor(
    readonly maxBytes: number,
    private readonly now: () => number = Date.now,
  ) {}

  get maxEntryBytes(): number {
    return Math.floor(this.maxBytes / 4);
  }

  get size(): number {
    return this.bytes;
  }

  private static id(k: ExportCacheKey): string {
    return `${k.bookId}\u0000${k.version}\u0000${k.tokenFloor}\u0000${k.excludeCategories ? 1 : 0}${k.includeContentHtml ? 1 : 0}${k.format ?? 'json'}`;
  }

  private remove(id: string, e: Entry): void {
    this.entries.delete(id);
    this.bytes -= e.body.length;
    const ids = this.byBook.get(e.bookId);
    ids?.delete(id);
    if (ids?.size === 0) this.byBook.delete(e.bookId);
  }

  /** Drops the book's bodies of other versions; an economy only (a lookup that raced a change drops the newer one). */
  private dropOtherVersions(key: ExportCacheKey): void {
    for (const id of this.byBook.get(key.bookId) ?? []) {
      const e = this.entries.get(id)!;
      if (e.version !== key.version) this.remove(id, e);
    }
  }

  /** The kept body for `key` (the book's current version), or undefined; counts nothing (see counted). */
  get(key: ExportCacheKey): Kept | undefined {
    if (this.maxBytes === 0) return undefined;
    this.dropOtherVersions(key);
    const id = ExportCache.id(key);
    const e = this.entries.get(id);
    if (e === undefined) return undefined;
    if (this.now() - e.keptAtMs > KEEP_MS) {
      this.remove(id, e);
      return undefined;
    }
    // Map order is insertion order: re-inserting makes this the most recently used.
    this.entries.delete(id);
    this.entries.set(id, e);
    return e;
  }

  counted(hit: boolean): void {
    if (this.maxBytes === 0) return;
    if (hit) this.hits++;
    else this.misses++;
  }

  /** Keeps `body` under the version of the snapshot it was read from, evicting least recently used bodies. */
  set(key: ExportCacheKey, body: Buffer, token: string): void {
    if (body.length > this.maxEntryBytes) return;
    this.dropOtherVersions(key);
    const id = ExportCache.id(key);
    const old = this.entries.get(id);
    if (old !== undefined) this.remove(id, old);
    for (const [oldest, e] of this.entries) {
      if (this.bytes + body.length <= this.maxBytes) break;
      this.remove(oldest, e);
    }
    this.entries.set(id, { body, token, bookId: key.bookId, version: key.version, keptAtMs: this.now() });
    let ids = this.byBook.get(key.bookId);
    if (ids === undefined) this.byBook.set(key.bookId, (ids = new Set()));
    ids.add(id);
    this.bytes += body.length;
  }
}

/** Every document of the book: neither a delta nor a resumed export. */
export const isFull = (request: ExportRequest) => request.changedSince === null && request.after === null;

/** The export cache's key of `request` for `book` as looked up. */
export function cacheKey(request: ExportRequest, book: BookLookup): ExportCacheKey {
  return {
    bookId: book.id,
    version: book.export_version,
    tokenFloor: book.token_floor,
    ...request.options,
    format: request.format,
  };
}

/** Documents in a complete export body: its closing `"meta":{"count":N}}` (export-api.md 4.1 rule 8). */
export function countOf(body: Buffer): number | undefined {
  const m = /"count":(\d+)\}\}\n?$/.exec(body.subarray(Math.max(0, body.length - 40)).toString('latin1'));
  return m ? Number(m[1]) : undefined;
}
