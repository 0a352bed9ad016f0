/**
 * The record `--if-changed` keeps beside a backup, `PATH.etag`: one line of JSON,
 * `{"etag":"…","size":N,"sha256":"…"}`, the ETag of the export and the size (bytes) and SHA-256
 * (hex) of PATH's bytes as written (compressed or not). The ETag is sent as `If-None-Match` only
 * while PATH still has that size and digest: a PATH removed, truncated or replaced since is
 * downloaded again. A record of another shape (an older client's plain ETag line) proves nothing
 * about PATH, so it asks for a download too.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';

export interface BackupRecord {
  etag: string;
  /** PATH's size, bytes. */
  size: number;
  /** SHA-256 of PATH's bytes, lowercase hex. */
  sha256: string;
}

/** The record file of a backup. */
export const recordFileOf = (file: string) => `${file}.etag`;

/** The record's text as written to `PATH.etag`. */
export const recordText = (r: BackupRecord) => `${JSON.stringify({ etag: r.etag, size: r.size, sha256: r.sha256 })}\n`;

function parseRecord(text: string): BackupRecord | null {
  try {
    const r = JSON.parse(text) as Partial<BackupRecord> | null;
    if (
      typeof r?.etag !== 'string' ||
      r.etag === '' ||
      !Number.isSafeInteger(r.size) ||
      typeof r.sha256 !== 'string' ||
      !/^[0-9a-f]{64}$/.test(r.sha256)
    )
      return null;
    return { etag: r.etag, size: r.size!, sha256: r.sha256 };
  } catch {
    return null;
  }
}

/** SHA-256 (hex) of a file, read as a stream in 1 MiB pieces. Rejects with the read's error. */
export async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * The ETag to send as `If-None-Match` for PATH: the record's, when PATH matches it; otherwise null
 * and why (for the log; null when there was no record at all).
 */
export async function currentEtag(
  file: string,
): Promise<{ etag: string; why: null } | { etag: null; why: string | null }> {
  const text = await readFile(recordFileOf(file), 'utf8').catch(() => null);
  if (text === null) return { etag: null, why: null };
  const record = parseRecord(text);
  if (record === null)
    return { etag: null, why: `${recordFileOf(file)} holds no size and digest of ${file}: downloading` };
  const size = await stat(file).then(
    (s) => (s.isFile() ? s.size : null),
    () => null,
  );
  if (size === null) return { etag: null, why: `${file} is missing: downloading` };
  // The size first: a cut or replaced file usually shows there without reading it.
  if (size !== record.size || (await fileSha256(file).catch(() => null)) !== record.sha256) {
    return { etag: null, why: `${file} does not match ${recordFileOf(file)} (changed since its backup): downloading` };
  }
  return { etag: record.etag, why: null };
}

/** The options an incremental backup's token was issued for; another set cannot use it (D12.4). */
export interface TokenOptions {
  book: string;
  format: 'json' | 'ndjson';
  includeCategories: boolean;
  html: boolean;
}

/**
 * The record `--incremental` keeps beside a backup, `PATH.token`: one line of JSON with the
 * export's `Export-Change-Token`, the options it was issued for, and PATH's size and SHA-256 as
 * written. Like `PATH.etag`, it vouches only for the bytes it describes.
 */
export interface TokenRecord {
  token: string;
  options: TokenOptions;
  size: number;
  sha256: string;
}

/** The token record file of a backup. */
export const tokenFileOf = (file: string) => `${file}.token`;

/** The token record's text as written to `PATH.token`. */
export const tokenRecordText = (r: TokenRecord) =>
  `${JSON.stringify({ token: r.token, options: { book: r.options.book, format: r.options.format, includeCategories: r.options.includeCategories, html: r.options.html }, size: r.size, sha256: r.sha256 })}\n`;

const sameOptions = (a: TokenOptions, b: TokenOptions) =>
  a.book === b.book && a.format === b.format && a.includeCategories === b.includeCategories && a.html === b.html;

/**
 * The change token to send as `?changedSince=` for PATH: the record's, when it was issued for
 * `options` and PATH still has its size and digest; otherwise null and why a full export is due.
 */
export async function currentToken(
  file: string,
  options: TokenOptions,
): Promise<{ token: string; why: null } | { token: null; why: string }> {
  const text = await readFile(tokenFileOf(file), 'utf8').catch(() => null);
  if (text === null) return { token: null, why: `no ${tokenFileOf(file)} yet: a full export` };
  let r: Partial<TokenRecord> | null = null;
  try {
    r = JSON.parse(text) as Partial<TokenRecord> | null;
  } catch {
    r = null;
  }
  const o = r?.options;
  if (
    typeof r?.token !== 'string' ||
    r.token === '' ||
    !Number.isSafeInteger(r.size) ||
    typeof r.sha256 !== 'string' ||
    typeof o !== 'object' ||
    o === null
  ) {
    return { token: null, why: `${tokenFileOf(file)} is not a token record: a full export` };
  }
  if (!sameOptions(o, options))
    return {
      token: null,
      why: `${tokenFileOf(file)} was kept for other options (${JSON.stringify(o)}): a full export`,
    };
  const size = await stat(file).then(
    (s) => (s.isFile() ? s.size : null),
    () => null,
  );
  if (size === null) return { token: null, why: `${file} is missing: a full export` };
  if (size !== r.size || (await fileSha256(file).catch(() => null)) !== r.sha256) {
    return {
      token: null,
      why: `${file} does not match ${tokenFileOf(file)} (changed since its backup): a full export`,
    };
  }
  return { token: r.token, why: null };
}
