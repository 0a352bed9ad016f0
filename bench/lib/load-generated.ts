/**
 * Loads a generated knowledge base (src/generate/generator.ts) straight into the database: user, API key,
 * book, then the documents through one `COPY documents (…) FROM STDIN` in PostgreSQL's text format,
 * all in one transaction (a failure loads nothing). Several times faster than the seed loader's
 * batched INSERTs, which matters for the 2 GB `large` size; memory stays bounded (one document
 * and one COPY chunk at a time, the writable's backpressure respected).
 *
 * Re-running is cheap: the book's description records the generator's parameters
 * (generatorMarker: version, seed, count, fingerprint). A book already holding the same generated
 * data is left as it is; one with other contents is an error unless `replace` is set.
 */
import { once } from 'node:events';
import type { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import type postgres from 'postgres';
import { hashApiKey } from '../../src/auth/api-key.js';
import type { SeedDocument } from '../../src/load/seed-types.js';
import { DOC_COLUMNS, editorState } from '../../src/load/seed-writer.js';
import { documentsForSize, generatedBook, type SizeName } from '../../src/generate/sizes.js';
import { generateDocuments } from '../../src/generate/generator.js';
import { inTransaction } from '../../src/db/transaction.js';

type Sql = postgres.Sql;
type Tx = postgres.TransactionSql<Record<string, never>>;
/** The parts of postgres.js's query object used here; `reject` is internal (see copyDocuments). */
type PendingQuery = { writable(): Promise<Writable>; reject?: (err: unknown) => void };

const COPY_SPECIAL = /[\\\n\r\t\0]/;
const COPY_SPECIAL_ALL = /[\\\n\r\t\0]/g;

function copyEscapeChar(c: string): string {
  if (c === '\\') return '\\\\';
  if (c === '\n') return '\\n';
  if (c === '\r') return '\\r';
  if (c === '\t') return '\\t';
  throw new Error('COPY: a NUL character cannot be stored in a PostgreSQL text value');
}

/**
 * A text value as a field of COPY's text format: backslash, newline, carriage return and tab are
 * backslash-escaped; everything else (any unicode) passes as is. Throws on a NUL character, which
 * PostgreSQL text cannot hold.
 */
function copyText(s: string): string {
  return COPY_SPECIAL.test(s) ? s.replace(COPY_SPECIAL_ALL, copyEscapeChar) : s;
}

/**
 * A PostgreSQL array literal of text elements: every element double-quoted, with `"` and `\`
 * backslash-escaped, so commas, braces, spaces and the word NULL stay plain text. `{}` when empty.
 * (Still to be passed through copyText for COPY.)
 */
function pgTextArray(a: readonly string[]): string {
  let out = '{';
  for (let i = 0; i < a.length; i++) {
    if (i > 0) out += ',';
    out += '"' + a[i]!.replace(/["\\]/g, '\\$&') + '"';
  }
  return out + '}';
}

const NULL = '\\N';

function field(s: string | null | undefined): string {
  return s === null || s === undefined ? NULL : copyText(s);
}

/**
 * One row of COPY text (tab-separated, newline-terminated) for document `d` of book `bookId`,
 * holding exactly what SeedWriter.addDocument would insert: unset timestamps become `now` (an ISO
 * 8601 string), an empty bodyFontSize NULL, contentYjs bytes as `\x` hex, contentJson as JSON text.
 */
function copyRow(bookId: string, d: SeedDocument, now: string): string {
  const yjs = d.contentYjs ? '\\\\x' + editorState(d.contentYjs).toString('hex') : NULL;
  const json = d.contentJson === null || d.contentJson === undefined ? NULL : copyText(JSON.stringify(d.contentJson));
  return (
    copyText(d.id) +
    '\t' +
    copyText(bookId) +
    '\t' +
    copyText(d.slug) +
    '\t' +
    copyText(d.name) +
    '\t' +
    copyText(d.type) +
    '\t' +
    field(d.parentId) +
    '\t' +
    copyText(d.orderKey) +
    '\t' +
    String(d.status) +
    '\t' +
    field(d.description) +
    '\t' +
    field(d.emojiInfo) +
    '\t' +
    field(d.cover?.url) +
    '\t' +
    field(d.cover?.position) +
    '\t' +
    (d.tags === null || d.tags === undefined ? NULL : copyText(pgTextArray(d.tags))) +
    '\t' +
    field(d.themeId) +
    '\t' +
    field(d.backgroundThemeId) +
    '\t' +
    field(d.bodyFontSize || null) +
    '\t' +
    field(d.createdAt ?? now) +
    '\t' +
    field(d.updatedAt ?? now) +
    '\t' +
    field(d.contentStr) +
    '\t' +
    field(d.contentHtml) +
    '\t' +
    yjs +
    '\t' +
    json +
    '\n'
  );
}

/** Characters of COPY text gathered before one write: large writes keep per-message overhead low. */
const CHUNK_CHARS = 1 << 20;
/**
 * Bytes the writable may hold before we wait for 'drain'. postgres.js creates it with Node's
 * default 16 KiB high-water mark, below one chunk, which would make every write wait and leave
 * PostgreSQL idle while the next chunk is generated; a few chunks in flight keep both busy.
 */
const MAX_BUFFERED = 4 * CHUNK_CHARS;

/** Settles once `stream` drains or the COPY fails (`failed` rejects). */
function drained(stream: Writable, failed: Promise<never>): Promise<void> {
  return Promise.race([once(stream, 'drain').then(() => undefined), failed]);
}

interface CopyResult {
  documents: number;
  /** UTF-8 bytes of COPY text sent. */
  bytes: number;
}

/**
 * Writes `docs` into book `bookId` with one `COPY documents FROM STDIN` on transaction `tx`.
 * The book must exist (or its foreign key be deferred). `onProgress(documents, bytes)` is called
 * after each document. Rejects with PostgreSQL's error (a duplicate id, a bad value) or the
 * iterator's; the COPY is then aborted and the caller's transaction must roll back.
 */
async function copyDocuments(
  tx: Tx,
  bookId: string,
  docs: Iterable<SeedDocument> | AsyncIterable<SeedDocument>,
  onProgress?: (documents: number, bytes: number) => void,
): Promise<CopyResult> {
  const now = new Date().toISOString();
  let failure: Error | null = null;
  let signal: (err: Error) => void = () => {};
  const failed = new Promise<never>((_, reject) => {
    signal = reject;
  });
  failed.catch(() => {});
  const fail = (err: unknown) => {
    failure ??= err instanceof Error ? err : new Error(String(err));
    signal(failure);
  };
  const query = tx.unsafe(`COPY documents (${DOC_COLUMNS.join(', ')}) FROM STDIN`) as unknown as PendingQuery;
  // postgres.js 3.4 never settles an ended COPY writable when PostgreSQL rejects the data after
  // CopyDone (porsager/postgres#1173: no 'finish', no 'error'); the server's error then reaches
  // only the query's own reject, so it is tapped here. Errors before CopyDone also destroy the stream.
  const reject = query.reject;
  if (typeof reject === 'function') {
    query.reject = (err: unknown) => {
      fail(err);
      reject.call(query, err);
    };
  }
  const stream = await query.writable();
  // Kept for the stream's life: an error emitted while no one waits on the stream (PostgreSQL
  // rejecting a row while we generate, or our own destroy below) would otherwise crash the process.
  stream.on('error', fail);
  let documents = 0;
  let bytes = 0;
  let chunk = '';
  const send = async () => {
    const buf = Buffer.from(chunk, 'utf8');
    chunk = '';
    bytes += buf.length;
    stream.write(buf);
    if (stream.writableLength > MAX_BUFFERED) await drained(stream, failed);
  };
  try {
    for await (const d of docs) {
      if (failure) throw failure;
      chunk += copyRow(bookId, d, now);
      documents++;
      if (chunk.length >= CHUNK_CHARS) await send();
      onProgress?.(documents, bytes + chunk.length);
    }
    if (chunk.length > 0) await send();
    if (failure) throw failure;
    // 'finish' comes once PostgreSQL confirmed the COPY (postgres.js calls back on CommandComplete).
    stream.end();
    await Promise.race([finished(stream), failed]);
  } catch (err) {
    // Sends CopyFail, so PostgreSQL ends the COPY with an error and the transaction is aborted;
    // after CopyDone the COPY is over and the stream is simply dropped.
    if (!stream.writableEnded && !stream.destroyed) stream.destroy(err as Error);
    throw failure ?? err;
  }
  return { documents, bytes };
}

/** The id under which the loader (and the CLI's seed files) store `key` for `userId`: derived from its hash. */
export function apiKeyId(userId: string, key: string): string {
  return `${userId}-${hashApiKey(key).subarray(0, 6).toString('hex')}`;
}

interface LoadGeneratedOptions {
  /** A named size (SIZES); or give `documents`. */
  size?: SizeName;
  /** Documents to generate, categories and inactive ones included; overrides `size`. */
  documents?: number;
  bookId: string;
  bookSlug: string;
  /** Owner; created when missing (named `userName`, default the id). */
  userId: string;
  userName?: string;
  /** Full API key for `userId`; only its hash is stored. Created when missing. */
  apiKey: string;
  /** Generator seed, default 42. */
  seed?: number;
  /** Delete a book with this id that holds other data (other seed, count or generator), then load. Default false: that is an error. */
  replace?: boolean;
  /**
   * After a load (not after a skip): `vacuum` (default) runs VACUUM (ANALYZE) documents, so the
   * planner knows the new rows and hint bits and the visibility map are set now rather than by the
   * first export (which would otherwise rewrite every page it reads); `analyze` only ANALYZE.
   */
  afterLoad?: 'vacuum' | 'analyze' | 'none';
  /** Called after each document with documents written and COPY bytes so far. */
  onProgress?: (documents: number, bytes: number) => void;
}

interface LoadGeneratedResult {
  /** True when the book already held this data and nothing was written. */
  skipped: boolean;
  /** Documents of the book (generated, categories and inactive ones included). */
  documents: number;
  /** UTF-8 bytes of COPY text sent (0 when skipped). */
  bytes: number;
  /** Wall time, ms, the afterLoad step included. */
  ms: number;
}

/**
 * Creates user `userId` and its API key `apiKey` unless they exist. Throws when the key belongs to
 * another user, is revoked or expired, or its id is taken.
 */
export async function ensureOwner(
  tx: postgres.TransactionSql,
  userId: string,
  apiKey: string,
  userName = userId,
): Promise<void> {
  await tx`INSERT INTO users (id, name) VALUES (${userId}, ${userName}) ON CONFLICT (id) DO NOTHING`;
  const hash = hashApiKey(apiKey);
  await tx`
    INSERT INTO api_keys (id, user_id, key_hash)
    VALUES (${apiKeyId(userId, apiKey)}, ${userId}, ${hash})
    ON CONFLICT DO NOTHING`;
  const [key] = await tx<{ ok: boolean }[]>`
    SELECT user_id = ${userId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS ok
    FROM api_keys WHERE key_hash = ${hash}`;
  if (!key?.ok)
    throw new Error(`user "${userId}": the API key exists for another user, is revoked or expired, or its id is taken`);
}

/**
 * Loads generated knowledge base `bookSlug` (id `bookId`) owned by `userId`, who can export it with
 * `apiKey`: user and key are created when missing (a key that exists for another user, or is
 * revoked or expired, is an error); the book and its documents are written in one transaction.
 * A book that already holds the same generated data is skipped (`skipped: true`); one holding
 * anything else is an error unless `replace`. Throws on an unknown size, a taken slug, or any
 * database error; nothing is written then.
 */
export async function loadGenerated(sql: Sql, opts: LoadGeneratedOptions): Promise<LoadGeneratedResult> {
  const started = Date.now();
  const documents = opts.documents ?? (opts.size ? documentsForSize(opts.size) : undefined);
  if (documents === undefined || !Number.isInteger(documents) || documents < 0) {
    throw new RangeError('loadGenerated: give a size or a non-negative integer number of documents');
  }
  const seed = opts.seed ?? 42;
  const book = generatedBook({ bookId: opts.bookId, bookSlug: opts.bookSlug, userId: opts.userId, documents, seed });
  const result = await inTransaction(sql, async (tx) => {
    await tx`SET LOCAL TimeZone = 'UTC'`;
    await ensureOwner(tx, opts.userId, opts.apiKey, opts.userName);

    const [have] = await tx<{ owner_id: string; slug: string; description: string | null; n: number }[]>`
      SELECT owner_id, slug, description, (SELECT count(*)::int FROM documents WHERE book_id = b.id) AS n
      FROM books b WHERE id = ${opts.bookId} FOR UPDATE`;
    if (have) {
      const same =
        have.owner_id === opts.userId &&
        have.slug === opts.bookSlug &&
        have.description === book.description &&
        have.n === documents;
      if (same) return { skipped: true, documents, bytes: 0 };
      if (!opts.replace) {
        const what = `${have.description ?? 'no description'}, ${have.n} documents`;
        throw new Error(
          `loadGenerated: book "${opts.bookId}" exists with other data (${what}); pass replace to reload it`,
        );
      }
      await tx`DELETE FROM books WHERE id = ${opts.bookId}`;
    }
    await tx`
      INSERT INTO books (id, owner_id, slug, name, description, cover_image, created_at, updated_at)
      VALUES (${book.id}, ${book.ownerId}, ${book.slug}, ${book.name}, ${book.description ?? null}, ${book.coverImage ?? null},
              ${book.createdAt!}, ${book.updatedAt!})`;
    const copied = await copyDocuments(
      tx,
      opts.bookId,
      generateDocuments({ bookId: opts.bookId, documents, seed }),
      opts.onProgress,
    );
    return { skipped: false, documents: copied.documents, bytes: copied.bytes };
  });
  const after = opts.afterLoad ?? 'vacuum';
  if (!result.skipped && after === 'vacuum') await sql`VACUUM (ANALYZE) documents`;
  if (!result.skipped && after === 'analyze') await sql`ANALYZE documents`;
  return { ...result, ms: Date.now() - started };
}
