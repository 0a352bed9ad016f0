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
  if (typeof v !== 'string' || v === '' || v.length > MAX_CHANGED_SINCE_CHARS) throw new ApiError('INVALID_PARAMETER', `${name} must be a change token`);
  return v;
}
