/**
 * One export request as the route read it, built once and passed down unchanged: who asked, the
 * knowledge base, the options that shape each document, the body's representation and encoding,
 * and the change token of a delta. The caller is verified before anything else is read (D5.5).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { bodyFormatOf, contentEncodingOf, type BodyFormat, type ContentEncoding } from './negotiate.js';
import { ApiError } from '../../errors.js';
import { booleanParam, positionParams, tokenParam } from './params.js';

/** What each exported document carries (export-api.md 4.1, D4). */
export interface ExportOptions {
  excludeCategories: boolean;
  includeContentHtml: boolean;
}

/** The API key's user and the key itself, by id: never the key (D10.5). */
export interface Caller {
  userId: string;
  keyId: string;
}

/** A place in the export's order (D1): an order key and a document id, which need not exist (D13.1). */
export interface ResumePosition {
  orderKey: string;
  id: string;
}

export interface ExportRequest {
  caller: Caller;
  bookSlug: string;
  options: ExportOptions;
  format: BodyFormat;
  encoding: ContentEncoding;
  /** Only what changed since this change token's export, and what left it (D12.2); null: all. */
  changedSince: string | null;
  /** Only the documents after this position, to resume a cut export (D13.1); null: from the first. */
  after: ResumePosition | null;
}

/** The request of `caller` for `bookSlug` with `query` and `headers`; throws ApiError INVALID_PARAMETER (D4.1, D13.1). */
export function exportRequestOf(
  caller: Caller,
  bookSlug: string,
  query: Record<string, unknown>,
  headers: IncomingHttpHeaders,
): ExportRequest {
  const changedSince = tokenParam(query, 'changedSince');
  const after = positionParams(query);
  if (after !== null && changedSince !== null)
    throw new ApiError('INVALID_PARAMETER', 'afterOrderKey and afterId cannot be combined with changedSince');
  return {
    caller,
    bookSlug,
    options: {
      excludeCategories: booleanParam(query, 'excludeCategories', true),
      includeContentHtml: booleanParam(query, 'includeContentHtml', true),
    },
    format: bodyFormatOf(headers),
    encoding: contentEncodingOf(headers),
    changedSince,
    after,
  };
}
