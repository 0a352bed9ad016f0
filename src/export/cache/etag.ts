/** Export ETags (D9.1): strong for identity bodies, weak for compressed ones, whose bytes may differ. */
import { createHash } from 'node:crypto';
import type { ExportRequest } from '../request/export-request.js';
import { PLAN_RULES_VERSION } from '../rewrite/plans/rewrite-plan.js';

/** The encoder's version (raise it when the bytes change for the same data), then the rewriting rules'. */
export const OUTPUT_FORMAT_VERSION = `1.${PLAN_RULES_VERSION}`;

/** The parts of a request that decide an export's bytes; a delta's token and a resumed export's position among them (D12.5, D13.1). */
export type Representation = Pick<ExportRequest, 'options' | 'format' | 'encoding' | 'changedSince' | 'after'>;

/**
 * `"kbx<version>-<27 base64url characters>"` of the export `r` asks for, of book `bookId` at export
 * version `version` under the prefix; `W/` when compressed.
 */
export function exportEtag(r: Representation, bookId: string, version: string, mediaProxyPrefix: string): string {
  const h = createHash('sha256');
  // NUL cannot occur in any of the parts, so the join is unambiguous.
  const { excludeCategories, includeContentHtml } = r.options;
  const parts = [
    OUTPUT_FORMAT_VERSION,
    r.format,
    r.encoding,
    bookId,
    version,
    excludeCategories,
    includeContentHtml,
    mediaProxyPrefix,
  ];
  if (r.changedSince !== null) parts.push(`since ${r.changedSince}`);
  // A resumed export holds other documents than a full one (D13.1); the parts are JSON, so NUL-free.
  if (r.after !== null) parts.push(`after ${JSON.stringify([r.after.orderKey, r.after.id])}`);
  h.update(parts.join('\0'));
  const tag = `"kbx${OUTPUT_FORMAT_VERSION}-${h.digest('base64url').slice(0, 27)}"`;
  return r.encoding === 'identity' ? tag : `W/${tag}`;
}
