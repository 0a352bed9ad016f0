/**
 * Query parameters of the export (export-api.md 4.1, decisions.md D4).
 */
import { ApiError } from '../errors.js';

/**
 * A boolean query parameter: `true`/`1` or `false`/`0`, the default when absent
 * (decisions.md D4.1). Anything else, a repeated parameter included, throws ApiError INVALID_PARAMETER.
 */
export function booleanParam(query: Record<string, unknown>, name: string, def: boolean): boolean {
  if (!Object.prototype.hasOwnProperty.call(query, name)) return def;
  const v = query[name];
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new ApiError('INVALID_PARAMETER', `${name} must be true, false, 1 or 0`);
}
