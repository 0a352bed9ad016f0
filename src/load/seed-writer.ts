/** Seed records in one transaction, all or nothing, in batches: one INSERT in flight while the caller reads on. */
import { SeedError } from '../errors.js';
import type { TransactionSql } from 'postgres';
import { hashApiKey } from '../auth/api-key.js';
import type { SeedBookHeader, SeedDocument, SeedUser } from './seed-types.js';
import { collectGarbage } from './collect-garbage.js';

export interface LoadSummary {
  users: number;
  apiKeys: number;
  books: number;
  documents: number;
}

type Tx = TransactionSql<Record<string, never>>;

/** The documents' columns the loaders write, in this INSERT's order (bench/lib's COPY loader too). */
export const DOC_COLUMNS = [
  'id',
  'book_id',
  'slug',
  'name',
  'type',
  'parent_id',
  'order_key',
  'status',
  'description',
  'emoji_info',
  'cover_url',
  'cover_position',
  'tags',
  'theme_id',
  'background_theme_id',
  'body_font_size',
  'created_at',
  'updated_at',
  'content_str',
  'content_html',
  'content_yjs',
  'content_json',
] as const;

/** Rewords a constraint violation as the record it is about; other errors pass through. */
function explain(err: unknown, what: string): unknown {
  const e = err as { code?: string; detail?: string; constraint_name?: string };
  if (e.code === '23505') return new SeedError(`duplicate ${what}: ${e.detail ?? 'already exists'}`);
  if (e.code === '23503') return new SeedError(`${what} refers to a missing record: ${e.detail ?? ''}`);
  if (e.code === '23514')
    return new SeedError(`${what} breaks a constraint (${e.constraint_name ?? 'check'}): ${e.detail ?? ''}`);
  return err;
}

/** Contents (UTF-16 units, bytes of contentYjs) from which a document is large. */
const LARGE_DOCUMENT = 1024 * 1024;

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/** contentYjs bytes: base64(url)-decoded, or the text's UTF-8 when not base64, so a placeholder loads (rules 4, 6). */
export function editorState(text: string): Buffer {
  const compact = text.replace(/\s+/g, '');
  return BASE64.test(compact) ? Buffer.from(compact, 'base64') : Buffer.from(text, 'utf8');
}

export class SeedWriter {
  private docs: Record<(typeof DOC_COLUMNS)[number], unknown>[] = [];
  private queuedBytes = 0;
  private queuedLarge = false;
  /** The INSERT still running: settles to its error, or null. */
  private inFlight: Promise<unknown> | null = null;
  private bookIds: string[] = [];
  readonly summary: LoadSummary = { users: 0, apiKeys: 0, books: 0, documents: 0 };

  /**
   * At most `batchSize` documents and `batchBytes` of contents per INSERT: a batch is about that plus
   * one document. Small by default: postgres.js copies a statement about four times as it builds and
   * sends it, and past glibc's mmap threshold (the shebang's MALLOC_MMAP_THRESHOLD_, 128 KB) each
   * copy is a fresh mapping faulted in page by page (bench/RESULTS.md, import-html).
   */
  constructor(
    private readonly tx: Tx,
    private readonly batchSize = 500,
    private readonly batchBytes = 64 * 1024,
  ) {}

  /** Call once, first: a book's documents may be written before the book row (the FK is deferrable). */
  async begin(): Promise<void> {
    await this.settle();
    await this.tx`SET CONSTRAINTS ALL DEFERRED`;
    // pglz took 2.6x lz4's time to compress the contents (EXPLAIN ANALYZE of the manual's pages):
    // PostgreSQL's share of a load, on the loader's own machine. Servers built without lz4 keep pglz.
    await this.tx`
      SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings
      WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)`;
  }

  /** Inserts a user and its keys (hash only, D5.1). Throws SeedError on a duplicate id or key. */
  async addUser(u: SeedUser, where: string): Promise<void> {
    await this.settle();
    try {
      await this.tx`INSERT INTO users (id, name) VALUES (${u.id}, ${u.name})`;
    } catch (err) {
      throw explain(err, `user ${where}`);
    }
    this.summary.users++;
    for (const k of u.apiKeys ?? []) {
      try {
        await this.tx`
          INSERT INTO api_keys (id, user_id, key_hash, expires_at, revoked_at)
          VALUES (${k.id}, ${u.id}, ${hashApiKey(k.key)}, ${k.expiresAt ?? null}, ${k.revokedAt ?? null})`;
      } catch (err) {
        throw explain(err, `API key "${k.id}" of ${where}`);
      }
      this.summary.apiKeys++;
    }
  }

  /** Inserts a book. Throws SeedError for an unknown owner, a duplicate id or slug. */
  async addBook(b: SeedBookHeader, where: string): Promise<void> {
    await this.settle();
    const [owner] = await this.tx`SELECT 1 FROM users WHERE id = ${b.ownerId}`;
    if (!owner) throw new SeedError(`${where}: unknown owner "${b.ownerId}"`);
    try {
      await this.tx`
        INSERT INTO books (id, owner_id, slug, name, description, cover_image, created_at, updated_at)
        VALUES (${b.id}, ${b.ownerId}, ${b.slug}, ${b.name}, ${b.description ?? null}, ${b.coverImage ?? null},
                COALESCE(${b.createdAt ?? null}::timestamptz, now()), COALESCE(${b.updatedAt ?? null}::timestamptz, now()))`;
    } catch (err) {
      throw explain(err, `book ${where}`);
    }
    this.bookIds.push(b.id);
    this.summary.books++;
  }

  /** Written when a batch is full, in documents or in bytes. */
  async addDocument(bookId: string, d: SeedDocument): Promise<void> {
    const now = new Date().toISOString();
    const yjs = d.contentYjs ? editorState(d.contentYjs) : null;
    const size = (d.contentHtml?.length ?? 0) + (d.contentStr?.length ?? 0) + (yjs?.length ?? 0);
    const large = size >= LARGE_DOCUMENT;
    this.queuedBytes += size;
    if (large) this.queuedLarge = true;
    this.docs.push({
      id: d.id,
      book_id: bookId,
      slug: d.slug,
      name: d.name,
      type: d.type,
      parent_id: d.parentId ?? null,
      order_key: d.orderKey,
      status: d.status,
      description: d.description ?? null,
      emoji_info: d.emojiInfo ?? null,
      cover_url: d.cover?.url ?? null,
      cover_position: d.cover?.position ?? null,
      tags: d.tags ?? null,
      theme_id: d.themeId ?? null,
      background_theme_id: d.backgroundThemeId ?? null,
      body_font_size: d.bodyFontSize || null,
      created_at: d.createdAt ?? now,
      updated_at: d.updatedAt ?? now,
      content_str: large ? null : (d.contentStr ?? null),
      content_html: large ? null : (d.contentHtml ?? null),
      content_yjs: yjs,
      // Typed json, serialised once: a JSON.stringify'd string would be stored as a jsonb string (rule 4).
      content_json: d.contentJson === null || d.contentJson === undefined ? null : this.tx.json(d.contentJson as never),
    });
    if (large) {
      await this.flush();
      await this.setContent(d.id, 'content_str', d.contentStr ?? null);
      await this.setContent(d.id, 'content_html', d.contentHtml ?? null);
    } else if (this.docs.length >= this.batchSize || this.queuedBytes >= this.batchBytes) {
      await this.flush();
    }
  }

  /** One large column in a statement of its own, after a collection: the client builds a statement 2-3 times over. */
  private async setContent(id: string, column: 'content_str' | 'content_html', value: string | null): Promise<void> {
    if (value === null) return;
    await collectGarbage();
    try {
      await this.tx`UPDATE documents SET ${this.tx(column)} = ${value} WHERE id = ${id}`;
    } catch (err) {
      throw explain(err, 'document');
    }
  }

  /** Writes the queued documents after the previous batch, awaiting only a large one. Throws SeedError on a duplicate id. */
  async flush(): Promise<void> {
    await this.settle();
    if (this.docs.length === 0) return;
    const batch = this.docs;
    const large = this.queuedLarge;
    this.docs = [];
    this.queuedBytes = 0;
    this.queuedLarge = false;
    const rows = this.tx(batch as never, DOC_COLUMNS as unknown as string[]);
    this.inFlight = this.tx`INSERT INTO documents ${rows}`.then(
      () => {
        this.summary.documents += batch.length;
        return null;
      },
      (err: unknown) => err,
    );
    if (large) await this.settle();
  }

  private async settle(): Promise<void> {
    const running = this.inFlight;
    if (running === null) return;
    this.inFlight = null;
    const err = await running;
    if (err !== null) throw explain(err, 'document');
  }

  /** Flushes, then checks every parentId (rule 1; off for a restore, which may lack an inactive parent) and book. */
  async finish(opts: { checkParents?: boolean } = {}): Promise<LoadSummary> {
    await this.flush();
    await this.settle();
    if (this.bookIds.length > 0 && opts.checkParents !== false) {
      const [orphan] = await this.tx<{ id: string; parent_id: string }[]>`
        SELECT d.id, d.parent_id FROM documents d
        WHERE d.book_id = ANY(${this.bookIds}) AND d.parent_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM documents p WHERE p.id = d.parent_id AND p.book_id = d.book_id)
        LIMIT 1`;
      if (orphan) {
        throw new SeedError(
          `document (id "${orphan.id}"): parentId "${orphan.parent_id}" is not a document of the same book`,
        );
      }
    }
    try {
      await this.tx`SET CONSTRAINTS ALL IMMEDIATE`;
    } catch (err) {
      throw explain(err, 'document');
    }
    return this.summary;
  }
}
