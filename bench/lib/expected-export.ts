/**
 * What the export returns for generated data, computed from the seed records alone (no database,
 * no parse5 streaming): the tests' independent model of the body and the size estimates of
 * `generate --estimate`.
 */
import { normalizeMediaPrefix } from '../../src/config.js';
import { rewriteHtml } from '../../src/export/rewrite/rewriter/html-rewriter.js';
import { rewriteMediaUrl } from '../../src/export/rewrite/rewriter/media-url.js';
import type { SeedBookHeader, SeedDocument } from '../../src/load/seed-types.js';
import { generateDocuments } from '../../src/generate/generator.js';
import { generatedBook, type GeneratedBookOptions } from '../../src/generate/sizes.js';

/** The default media proxy prefix (export-api.md 2.2 rule 1, decisions.md D3.1). */
export const DEFAULT_MEDIA_PREFIX = '/media/';

const orNull = (s: string | null | undefined) => (s === null || s === undefined || s === '' ? null : s);
const orDefault = (s: string | null | undefined, def: string) => (s === null || s === undefined || s === '' ? def : s);

/**
 * The document object a default export returns for stored document `d` (export-api.md 2.2,
 * decisions.md D2 defaults, D3 rewriting with `mediaPrefix`; contentHtml left as stored when
 * `mediaPrefix` is null), fields in the order of table 2.2. Whether `d` is exported at all (status,
 * type) is the caller's business. Written from the spec, not from the server's encoder, so tests can
 * hold the server to it.
 */
export function exportedDocument(
  d: SeedDocument,
  mediaPrefix: string | null = DEFAULT_MEDIA_PREFIX,
): Record<string, unknown> {
  const prefix = mediaPrefix === null ? null : normalizeMediaPrefix(mediaPrefix);
  const coverUrl = orNull(d.cover?.url);
  const html = orNull(d.contentHtml);
  return {
    id: d.id,
    slug: d.slug,
    name: d.name,
    type: d.type,
    parentId: orNull(d.parentId),
    orderKey: d.orderKey,
    description: orNull(d.description),
    emojiInfo: orNull(d.emojiInfo),
    cover:
      coverUrl === null
        ? null
        : {
            url: prefix === null ? coverUrl : rewriteMediaUrl(coverUrl, prefix),
            position: orDefault(d.cover?.position, 'center'),
          },
    tags: d.tags === null || d.tags === undefined || d.tags.length === 0 ? null : d.tags,
    themeId: orDefault(d.themeId, 'default'),
    backgroundThemeId: orDefault(d.backgroundThemeId, 'transparent'),
    bodyFontSize: orDefault(d.bodyFontSize, 'default'),
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    contentStr: orNull(d.contentStr),
    contentHtml: html === null || prefix === null ? html : rewriteHtml(html, prefix),
  };
}

/** The book object of the export for a stored book (export-api.md 2.1; coverImage as stored, D3.6). */
function exportedBook(b: SeedBookHeader): Record<string, unknown> {
  return {
    id: b.id,
    slug: b.slug,
    name: b.name,
    description: orNull(b.description),
    coverImage: orNull(b.coverImage),
    createdAt: b.createdAt,
    updatedAt: b.updatedAt,
  };
}

interface ExportEstimate {
  /** Documents the default export returns (active, not categories). */
  documents: number;
  /** UTF-8 bytes of the whole response body. */
  bytes: number;
}

/**
 * UTF-8 bytes of `s` as a JSON string: its own bytes plus quotes and escapes (all ASCII, so the
 * characters JSON.stringify adds are bytes). Cheaper than encoding the stringified copy, which is
 * most of an estimate's time otherwise. Assumes no lone surrogates (PostgreSQL text holds none).
 */
function jsonStringBytes(s: string): number {
  return Buffer.byteLength(s) + JSON.stringify(s).length - s.length;
}

/** UTF-8 bytes of exportedDocument(d, mediaPrefix) as JSON. */
function exportedDocumentBytes(d: SeedDocument, mediaPrefix: string | null = DEFAULT_MEDIA_PREFIX): number {
  const doc = exportedDocument(d, mediaPrefix);
  const str = doc.contentStr as string | null;
  const html = doc.contentHtml as string | null;
  doc.contentStr = null;
  doc.contentHtml = null;
  let bytes = Buffer.byteLength(JSON.stringify(doc));
  if (str !== null) bytes += jsonStringBytes(str) - 4;
  if (html !== null) bytes += jsonStringBytes(html) - 4;
  return bytes;
}

/**
 * UTF-8 bytes of the default export's body (excludeCategories=true, includeContentHtml=true) of
 * a generated book, computed from the spec (exportedDocument). With `rewrite: false` contentHtml is
 * counted as stored: a lower bound, since rewriting only ever inserts the prefix, and several times
 * faster (no HTML tokenizer). `onProgress(generated)` is called every 1000 documents.
 */
export function estimateExportBytes(
  opts: GeneratedBookOptions & { rewrite?: boolean; mediaPrefix?: string; onProgress?: (generated: number) => void },
): ExportEstimate {
  const prefix = opts.rewrite === false ? null : (opts.mediaPrefix ?? DEFAULT_MEDIA_PREFIX);
  const opening = `{"success":true,"book":${JSON.stringify(exportedBook(generatedBook(opts)))},"documents":[`;
  let bytes = Buffer.byteLength(opening);
  let count = 0;
  let i = 0;
  for (const d of generateDocuments({ bookId: opts.bookId, documents: opts.documents, seed: opts.seed ?? 42 })) {
    if (++i % 1000 === 0) opts.onProgress?.(i);
    if (d.status !== 1 || d.type === 'category') continue;
    bytes += exportedDocumentBytes(d, prefix) + (count > 0 ? 1 : 0);
    count++;
  }
  bytes += Buffer.byteLength(`],"meta":{"count":${count}}}`);
  return { documents: count, bytes };
}
