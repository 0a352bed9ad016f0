/** Export ETags (decisions.md D9.1): strong for identity bodies, weak for compressed ones, whose bytes may differ. */
import { createHash } from 'node:crypto';
import type { BodyFormat } from '../encode/body-format.js';
import type { ContentEncoding } from '../respond/compression.js';
import { PLAN_RULES_VERSION } from '../rewrite/plans/rewrite-plan.js';

/** The encoder's version (raise it when the bytes change for the same data), then the rewriting rules'. */
export const OUTPUT_FORMAT_VERSION = `1.${PLAN_RULES_VERSION}`;

export interface Representation {
  bookId: string;
  version: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  format: BodyFormat;
  /** A delta's change token (decisions.md D12.5: a delta has an ETag of its own); null for a full export. */
  changedSince: string | null;
}

/** `"kbx<version>-<27 base64url characters>"` of `r` under the prefix and `encoding`, `W/` when compressed. */
export function exportEtag(r: Representation, encoding: ContentEncoding, mediaProxyPrefix: string): string {
  const h = createHash('sha256');
  // NUL cannot occur in any of the parts, so the join is unambiguous.
  const parts = [OUTPUT_FORMAT_VERSION, r.format, encoding, r.bookId, r.version, r.excludeCategories, r.includeContentHtml, mediaProxyPrefix];
  if (r.changedSince !== null) parts.push(`since ${r.changedSince}`);
  h.update(parts.join('\0'));
  const tag = `"kbx${OUTPUT_FORMAT_VERSION}-${h.digest('base64url').slice(0, 27)}"`;
  return encoding === 'identity' ? tag : `W/${tag}`;
}
