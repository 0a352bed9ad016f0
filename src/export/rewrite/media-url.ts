/**
 * Media proxy URL rules (decisions.md D3.1, D3.2, D3.6, D3.7).
 * Called for every `cover.url` and every rewritable attribute, so the hot paths
 * walk char codes instead of running regexes or allocating intermediate strings.
 */
import { isAsciiAlpha, isAsciiWhitespace } from './ascii.js';
import { mapSrcsetRanges } from './srcset.js';
import { normalisePath, pathNeedsNormalising } from './url-path.js';

// Characters that would let a configured prefix break out of an attribute value or
// change how it is tokenised when spliced into HTML (see html-rewriter.ts).
const FORBIDDEN_PREFIX_CHARS = /[\s"'<>&`]/;

/**
 * Validates the configured prefix and makes it end with exactly one `/` (decisions.md D3.1).
 * Throws on an empty prefix or one holding white space, quotes, `<`, `>`, `&` or a backtick,
 * because the prefix is spliced verbatim into HTML attribute values.
 */
export function normalizeMediaPrefix(p: string): string {
  if (p.length === 0) throw new Error('media proxy prefix must not be empty');
  if (FORBIDDEN_PREFIX_CHARS.test(p)) {
    throw new Error(`media proxy prefix contains a forbidden character: ${JSON.stringify(p)}`);
  }
  let end = p.length;
  while (end > 0 && p.charCodeAt(end - 1) === 0x2f /* / */) end--;
  return p.slice(0, end) + '/';
}

/** `[s, e)` of `u[from, to)` once ASCII white space is trimmed from both ends. */
function trimBounds(u: string, from: number, to: number): [number, number] {
  let s = from;
  let e = to;
  while (s < e && isAsciiWhitespace(u.charCodeAt(s))) s++;
  while (e > s && isAsciiWhitespace(u.charCodeAt(e - 1))) e--;
  return [s, e];
}

/** Relativity test on `u[s, e)`, already trimmed. */
function isRelativeRange(u: string, s: number, e: number): boolean {
  if (s >= e) return false;
  const c0 = u.charCodeAt(s);
  if (c0 === 0x23 /* # */) return false;
  if (c0 === 0x2f /* / */ && s + 1 < e && u.charCodeAt(s + 1) === 0x2f) return false;
  if (isAsciiAlpha(c0)) {
    // ^[A-Za-z][A-Za-z0-9+.-]*: — a colon after a valid scheme run means absolute.
    for (let i = s + 1; i < e; i++) {
      const c = u.charCodeAt(i);
      if (c === 0x3a /* : */) return false;
      const schemeChar =
        isAsciiAlpha(c) || (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2e || c === 0x2d;
      if (!schemeChar) break;
    }
  }
  return true;
}

/**
 * How one URL is rewritten: null when it is left as it is, `[start, end)` when the result is
 * `prefix + u.slice(start, end)` (the common case, no copy until the result is built), or the
 * string that follows the prefix when D3.7 had to normalise the path.
 */
type Rewrite = [number, number] | string | null;

/**
 * The range of `u` that follows the prefix once rewritten, when the rewrite is exactly
 * `prefix + u.slice(start, end)`; null when `u` is left as it is (decisions.md D3.1, D3.2) or when
 * its path needs the D3.7 normalisation, which builds a new value. Exposed so the HTML rewriter can
 * splice the prefix into raw attribute text, character references and all, without redoing this.
 */
export function mediaUrlKeptRange(u: string, prefix: string): [number, number] | null {
  const r = planRewrite(u, 0, u.length, prefix);
  return typeof r === 'string' ? null : r;
}

/**
 * The rewrite of `u[from, to)`, so srcset candidates need no substring.
 *
 * A value that already starts with the prefix stays as it is (D3.2, idempotence) unless the rest
 * holds a `\` or a dot segment: `/media/../admin/x.png` would climb out of the prefix in a
 * browser, so it becomes `/media/admin/x.png`, the rest normalised as any `u'` is (D3.7). Output
 * never needs that normalisation again, so rewriting stays idempotent.
 */
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

/**
 * Rewrites a relative URL to `prefix + u'`, where `u'` is the trimmed URL without leading
 * `./` and `/` (decisions.md D3.1, D3.2, D3.6) and with its path kept inside the prefix (D3.7):
 * `\` read as `/`, `.` segments dropped, `..` (also `%2e`-encoded) removing the segment before it
 * and dropped at the start; `?query#fragment` as written. `../../admin/x.png` -> `PREFIX +
 * admin/x.png`. A value already carrying the prefix is returned as the same string unless its rest
 * holds `\` or a dot segment (then the rest is normalised: `/media/../x.png` -> `/media/x.png`).
 * Anything else is returned as the same string. `prefix` must come from normalizeMediaPrefix.
 */
export function rewriteMediaUrl(u: string, prefix: string): string {
  const r = planRewrite(u, 0, u.length, prefix);
  return applyRewrite(u, r, prefix) ?? u;
}

/** The rewritten value for a non-null plan, or null. */
function applyRewrite(u: string, r: Rewrite, prefix: string): string | null {
  if (r === null) return null;
  return typeof r === 'string' ? prefix + r : prefix + u.slice(r[0], r[1]);
}

/**
 * Rewrites every candidate URL of a `srcset` value (decisions.md D3.3) as rewriteMediaUrl does
 * (D3.1, D3.2, D3.7), split and kept as srcset.ts says.
 */
export function rewriteSrcset(value: string, prefix: string): string {
  return mapSrcsetRanges(value, (v, start, end) => applyRewrite(v, planRewrite(v, start, end, prefix), prefix));
}
