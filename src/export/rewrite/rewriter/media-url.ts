/** Media proxy URL rules (D3.1, D3.2, D3.6, D3.7), on char codes: they run for every URL. */
import { isAsciiAlpha, isAsciiWhitespace } from './ascii.js';
import { mapSrcsetRanges } from './srcset.js';
import { normalisePath, pathNeedsNormalising } from './url-path.js';

function trimBounds(u: string, from: number, to: number): [number, number] {
  let s = from;
  let e = to;
  while (s < e && isAsciiWhitespace(u.charCodeAt(s))) s++;
  while (e > s && isAsciiWhitespace(u.charCodeAt(e - 1))) e--;
  return [s, e];
}

function isRelativeRange(u: string, s: number, e: number): boolean {
  if (s >= e) return false;
  const c0 = u.charCodeAt(s);
  if (c0 === 0x23 /* # */) return false;
  if (c0 === 0x2f /* / */ && s + 1 < e && u.charCodeAt(s + 1) === 0x2f) return false;
  if (isAsciiAlpha(c0)) {
    // A colon after a valid scheme run means absolute.
    for (let i = s + 1; i < e; i++) {
      const c = u.charCodeAt(i);
      if (c === 0x3a /* : */) return false;
      const schemeChar = isAsciiAlpha(c) || (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2e || c === 0x2d;
      if (!schemeChar) break;
    }
  }
  return true;
}

/** null: leave as is; `[start, end)`: `prefix + u.slice(start, end)`; a string: what follows the prefix (D3.7). */
type Rewrite = [number, number] | string | null;

/** The range of `u` kept after the prefix, or null when `u` stays as is or D3.7 builds a new path. */
export function mediaUrlKeptRange(u: string, prefix: string): [number, number] | null {
  const r = planRewrite(u, 0, u.length, prefix);
  return typeof r === 'string' ? null : r;
}

function planRewrite(u: string, from: number, to: number, prefix: string): Rewrite {
  const [s, e] = trimBounds(u, from, to);
  if (!isRelativeRange(u, s, e)) return null;
  if (e - s >= prefix.length && u.startsWith(prefix, s)) {
    const rest = s + prefix.length;
    return pathNeedsNormalising(u, rest, e) ? normalisePath(u, rest, e) : null;
  }
  let i = s;
  while (i < e) {
    const c = u.charCodeAt(i);
    if (c === 0x2f /* / */) i++;
    else if (c === 0x2e /* . */ && i + 1 < e && u.charCodeAt(i + 1) === 0x2f) i += 2;
    else break;
  }
  return pathNeedsNormalising(u, i, e) ? normalisePath(u, i, e) : [i, e];
}

/** `prefix + u'` for a relative URL: trimmed, leading `./` and `/` dropped, kept inside the prefix (D3.7); else `u`. */
export function rewriteMediaUrl(u: string, prefix: string): string {
  const r = planRewrite(u, 0, u.length, prefix);
  return applyRewrite(u, r, prefix) ?? u;
}

function applyRewrite(u: string, r: Rewrite, prefix: string): string | null {
  if (r === null) return null;
  return typeof r === 'string' ? prefix + r : prefix + u.slice(r[0], r[1]);
}

export function rewriteSrcset(value: string, prefix: string): string {
  return mapSrcsetRanges(value, (v, start, end) => applyRewrite(v, planRewrite(v, start, end, prefix), prefix));
}
