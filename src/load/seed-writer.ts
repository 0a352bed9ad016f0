/**
 * Writes seed records inside one transaction, documents in batches, so that loading is
 * all-or-nothing (seed-format.md rule 6) with bounded memory. Shared by `load` and `import-html`.
 */
import type { TransactionSql } from 'postgres';
import { hashApiKey } from '../auth/api-key.js';
import type { SeedBookHeader, SeedDocument, SeedUser } from './seed-types.js';
import { SeedError } from './seed-validate.js';

export interface LoadSummary {
  users: number;
  apiKeys: number;
  books: number;
  documents: number;
}

type Tx = TransactionSql<Record<string, never>>;

const DOC_COLUMNS = [
  'id', 'book_id', 'slug', 'name', 'type', 'parent_id', 'order_key', 'status', 'description', 'emoji_info',
  'cover_url', 'cover_position', 'tags', 'theme_id', 'background_theme_id', 'body_font_size', 'created_at',
  'updated_at', 'content_str', 'content_html', 'content_yjs', 'content_json',
] as const;

/** Rewords a constraint violation as the record it is about; other errors pass through. */
function explain(err: unknown, what: string): unknown {
  const e = err as { code?: string; detail?: string; constraint_name?: string };
  if (e.code === '23505') return new SeedError(`duplicate ${what}: ${e.detail ?? 'already exists'}`);
  if (e.code === '23503') return new SeedError(`${what} refers to a missing record: ${e.detail ?? ''}`);
  if (e.code === '23514') return new SeedError(`${what} breaks a constraint (${e.constraint_name ?? 'check'}): ${e.detail ?? ''}`);
  return err;
}

const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * contentYjs bytes: the base64 (or base64url) decoding, or the text's own UTF-8 bytes when it is
 * not base64, so a placeholder loads rather than failing (seed-format.md rule 4, rule 6).
 */
export function editorState(text: string): Buffer {
  const compact = text.replace(/\s+/g, '');
  return BASE64.test(compact) ? Buffer.from(compact, 'base64') : Buffer.from(text, 'utf8');
}

export class SeedWriter {
  private docs: Record<(typeof DOC_COLUMNS)[number], unknown>[] = [];
  private bookIds: string[] = [];
  readonly summary: LoadSummary = { users: 0, apiKeys: 0, books: 0, documents: 0 };

  /** @param batchSize documents per INSERT. */
  constructor(
    private readonly tx: Tx,
    private readonly batchSize = 500,
  ) {}

  /** Call once, first: a book's documents may be written before the book row (the FK is deferrable). */
  async begin(): Promise<void> {
    await this.tx`SET CONSTRAINTS ALL DEFERRED`;
  }

  /** Inserts a user and its keys (hash only, decisions.md D5.1). Throws SeedError on a duplicate id or key. */
  async addUser(u: SeedUser, where: string): Promise<void> {
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

  /** Queues a document of book `bookId`; written when a batch is full. */
  async addDocument(bookId: string, d: SeedDocument): Promise<void> {
    const now = new Date().toISOString();
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
      content_str: d.contentStr ?? null,
      content_html: d.contentHtml ?? null,
      content_yjs: d.contentYjs ? editorState(d.contentYjs) : null,
      // A parameter typed json: the client serialises it once. A JSON.stringify'd string would be
      // serialised again and stored as a jsonb string (seed-format.md rule 4: any JSON value).
      content_json: d.contentJson === null || d.contentJson === undefined ? null : this.tx.json(d.contentJson as never),
    });
    if (this.docs.length >= this.batchSize) await this.flush();
  }

  /** Writes queued documents. Throws SeedError on a duplicate id. */
  async flush(): Promise<void> {
    if (this.docs.length === 0) return;
    const batch = this.docs;
    this.docs = [];
    try {
      const rows = this.tx(batch as never, DOC_COLUMNS as unknown as string[]);
      await this.tx`INSERT INTO documents ${rows}`;
    } catch (err) {
      throw explain(err, 'document');
    }
    this.summary.documents += batch.length;
  }

  /**
   * Flushes, then checks what a stream reader cannot check record by record: every parentId names a
   * document of the same book (seed-format.md rule 1; `checkParents: false` for a restored export,
   * whose documents may name an inactive parent it does not hold), every document's book exists.
   */
  async finish(opts: { checkParents?: boolean } = {}): Promise<LoadSummary> {
    await this.flush();
    if (this.bookIds.length > 0 && opts.checkParents !== false) {
      const [orphan] = await this.tx<{ id: string; parent_id: string }[]>`
        SELECT d.id, d.parent_id FROM documents d
        WHERE d.book_id = ANY(${this.bookIds}) AND d.parent_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM documents p WHERE p.id = d.parent_id AND p.book_id = d.book_id)
        LIMIT 1`;
      if (orphan) {
        throw new SeedError(`document (id "${orphan.id}"): parentId "${orphan.parent_id}" is not a document of the same book`);
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
