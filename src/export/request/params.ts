/** Query parameters of the export (export-api.md 4.1, D4). */
import { ApiError } from '../../errors.js';
import { MAX_CHANGED_SINCE_CHARS } from '../../http/routes.js';

/** `true`/`1`, `false`/`0`, or `def` when absent (D4.1); else, repeats included, throws ApiError INVALID_PARAMETER. */
export function booleanParam(query: Record<string, unknown>, name: string, def: boolean): boolean {
  if (!Object.prototype.hasOwnProperty.call(query, name)) return def;
  const v = query[name];
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new ApiError('INVALID_PARAMETER', `${name} must be true, false, 1 or 0`);
}

/**
 * A change token parameter (D12.2): its value, null when absent. Empty, repeated or
 * longer than MAX_CHANGED_SINCE_CHARS throws ApiError INVALID_PARAMETER; the token itself is checked
 * by the export.
 */
export function tokenParam(query: Record<string, unknown>, name: string): string | null {
  if (!Object.prototype.hasOwnProperty.call(query, name)) return null;
  const v = query[name];
  if (typeof v !== 'string' || v === '' || v.length > MAX_CHANGED_SINCE_CHARS)
    throw new ApiError('INVALID_PARAMETER', `${name} must be a change token`);
  return v;
}

/** The longest order key or id a position takes: far above any stored one, and the request line's limit keeps it lower still. */
const MAX_POSITION_CHARS = 1024;

/**
 * `afterOrderKey` and `afterId` (D13.1): both, as a position, or neither, null. One without the
 * other, a repeated one, one longer than MAX_POSITION_CHARS, or one with a NUL (no stored value
 * has one) throws ApiError INVALID_PARAMETER.
 */
export function positionParams(query: Record<string, unknown>): { orderKey: string; id: string } | null {
  const has = (name: string) => Object.prototype.hasOwnProperty.call(query, name);
  if (!has('afterOrderKey') && !has('afterId')) return null;
  if (!has('afterOrderKey') || !has('afterId'))
    throw new ApiError('INVALID_PARAMETER', 'afterOrderKey and afterId go together');
  const value = (name: string): string => {
    const v = query[name];
    if (typeof v !== 'string' || v.length > MAX_POSITION_CHARS || v.includes('\0')) {
      throw new ApiError(
        'INVALID_PARAMETER',
        `${name} must be one order key or document id of at most ${MAX_POSITION_CHARS} characters`,
      );
    }
    return v;
  };
  return { orderKey: value('afterOrderKey'), id: value('afterId') };
}
