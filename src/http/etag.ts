/**
 * Entity tags of exports (decisions.md D9.1, D9.2). An export's body is a function of the book's
 * id and export version (a random value, new in every transaction that changes what the export
 * holds: sql/0003), the query options, MEDIA_PROXY_PREFIX and this server's output format; the
 * ETag is a hash of exactly these, so equal ETags promise byte-identical bodies. A deleted and
 * re-created book has a new id and version; a restored one has the version of the data it holds.
 */
import { createHash } from 'node:crypto';

/** Bumped whenever a change to the code changes the bytes of an export for the same data. */
const EXPORT_FORMAT_VERSION = 1;

interface EtagInput {
  bookId: string;
  /** books.export_version as the export read it. */
  version: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  /** The normalised MEDIA_PROXY_PREFIX. */
  mediaProxyPrefix: string;
  /** The body's media type: `application/json` or `application/x-ndjson` (D9.4). */
  format: string;
  /** The Content-Encoding (D9.3): a compressed body is other bytes, so it has an ETag of its own. */
  encoding: string;
}

/** The strong ETag of an export, quoted: `"kbx1-<27 base64url characters>"`. */
export function exportEtag(e: EtagInput): string {
  const h = createHash('sha256');
  // NUL cannot occur in any of the parts, so the join is unambiguous.
  h.update(
    [EXPORT_FORMAT_VERSION, e.format, e.encoding, e.bookId, e.version, e.excludeCategories, e.includeContentHtml, e.mediaProxyPrefix].join('\0'),
  );
  return `"kbx${EXPORT_FORMAT_VERSION}-${h.digest('base64url').slice(0, 27)}"`;
}

/**
 * Whether `If-None-Match` (`header`) matches `etag` (RFC 9110 13.1.2): `*`, or a list holding it,
 * compared weakly (a `W/` prefix is ignored), as the RFC requires for this header.
 */
export function ifNoneMatchHits(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const value = header.trim();
  if (value === '*') return true;
  for (const part of value.split(',')) {
    const tag = part.trim();
    if ((tag.startsWith('W/') ? tag.slice(2) : tag) === etag) return true;
  }
  return false;
}
