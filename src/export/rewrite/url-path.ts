/**
 * Dot segments of a URL path read as a browser reads them (decisions.md D3.7), shared by the
 * media proxy rewrite (media-url.ts) and import-html's root-relative resolution (corpus-urls.ts).
 *
 * The WHATWG URL parser removes tab, LF and CR from the whole input, treats `\` as `/` in the path
 * of http(s) URLs, and takes `%2e` (any case) for a `.`; all three are honoured here, or a value
 * such as `.%2E\..\x` or `.\n./x` would look harmless and still climb out of its directory. The C0
 * controls and spaces it strips from the end of a URL count too (`..\x01` is `..`).
 * Everything works on `u[s, e)` ranges so that the common URL, which needs none of this, is only
 * scanned and never copied.
 */

/** Tab, LF and CR, which the URL parser strips anywhere in a URL. */
function isTabOrNewline(c: number): boolean {
  return c === 0x09 || c === 0x0a || c === 0x0d;
}

function skipTabs(u: string, i: number, e: number): number {
  while (i < e && isTabOrNewline(u.charCodeAt(i))) i++;
  return i;
}

/** `/`, and `\`, which browsers read as `/` in the path of an http(s) URL. */
export function isPathSlash(c: number): boolean {
  return c === 0x2f || c === 0x5c;
}

/**
 * 1 when the segment `u[s, e)` is `.`, 2 when it is `..`, 0 otherwise (decisions.md D3.7), with a
 * dot also written `%2e` or `%2E` and tab, LF and CR ignored, as the URL parser reads it.
 * An empty segment is 0.
 */
function dotSegment(u: string, s: number, e: number): 0 | 1 | 2 {
  let dots = 0;
  for (let i = skipTabs(u, s, e); i < e; i = skipTabs(u, i, e)) {
    const c = u.charCodeAt(i);
    if (c === 0x2e /* . */) {
      i++;
    } else if (c === 0x25 /* % */) {
      const two = skipTabs(u, i + 1, e);
      if (two >= e || u.charCodeAt(two) !== 0x32 /* 2 */) return 0;
      const letter = skipTabs(u, two + 1, e);
      if (letter >= e || (u.charCodeAt(letter) | 0x20) !== 0x65 /* e */) return 0;
      i = letter + 1;
    } else {
      return 0;
    }
    if (++dots > 2) return 0;
  }
  return dots as 0 | 1 | 2;
}

/**
 * `e` moved back over C0 controls and spaces: the URL parser strips them from the end of a URL,
 * so `..\x01` at the very end is a `..` segment (inside a path they are percent-encoded instead).
 */
function urlEnd(u: string, s: number, e: number): number {
  while (e > s && u.charCodeAt(e - 1) <= 0x20) e--;
  return e;
}

/** Where the path part of `u[s, e)` ends: at its first `?` or `#`, else at `e`. */
function pathEnd(u: string, s: number, e: number): number {
  for (let i = s; i < e; i++) {
    const c = u.charCodeAt(i);
    if (c === 0x3f /* ? */ || c === 0x23 /* # */) return i;
  }
  return e;
}

/**
 * From `lastIndex`, the longest run of path segments none of which can be a dot segment: each is
 * empty or starts with something other than `.`, `%`, a control or a space, and none holds `\`,
 * `?`, `#`, a control or a space. White space stops it, so in a srcset it never runs past the
 * candidate. V8 runs it as native code, faster than a loop over char codes.
 */
const PLAIN_SEGMENTS = /(?:[^\\/?#.%\x00-\x20][^\\/?#\x00-\x20]*)?(?:\/(?:[^\\/?#.%\x00-\x20][^\\/?#\x00-\x20]*)?)*/y;

/**
 * Whether the path part of `u[s, e)` holds a `\` or a dot segment, the two things D3.7 changes.
 * This is the hot path's only extra cost: PLAIN_SEGMENTS clears an ordinary path in one native
 * scan, and only a path it stops short in is walked segment by segment.
 */
export function pathNeedsNormalising(u: string, s: number, e: number): boolean {
  PLAIN_SEGMENTS.lastIndex = s;
  PLAIN_SEGMENTS.test(u);
  const plainEnd = PLAIN_SEGMENTS.lastIndex;
  if (plainEnd >= e) return false;
  const c = u.charCodeAt(plainEnd);
  return c !== 0x3f /* ? */ && c !== 0x23 /* # */ && hasBackslashOrDotSegment(u, s, e);
}

/** pathNeedsNormalising's exact answer, one segment at a time. */
function hasBackslashOrDotSegment(u: string, s: number, e: number): boolean {
  let seg = s;
  for (let i = s; i < e; i++) {
    const c = u.charCodeAt(i);
    if (c > 0x5c /* \ */) continue;
    if (c === 0x5c) return true;
    if (c === 0x2f /* / */) {
      if (isDotSegment(u, seg, i)) return true;
      seg = i + 1;
    } else if (c === 0x3f /* ? */ || c === 0x23 /* # */) {
      return isDotSegment(u, seg, i);
    }
  }
  return isDotSegment(u, seg, urlEnd(u, seg, e));
}

/** dotSegment(u, s, e) !== 0, without the call for a segment that cannot be one. */
function isDotSegment(u: string, s: number, e: number): boolean {
  if (s >= e) return false;
  const c = u.charCodeAt(s);
  return (c === 0x2e || c === 0x25 || c <= 0x20) && dotSegment(u, s, e) !== 0;
}

/**
 * Appends the segments of the path `u[s, e)` (no query or fragment) to `stack` by the rule of
 * decisions.md D3.7: `\` separates like `/`, `.` segments are dropped, `..` removes the last
 * segment of `stack` and is dropped when `stack` is empty, so nothing climbs above the start.
 * Empty segments are dropped while `stack` is empty (a leading `/` or `\` adds nothing).
 * Returns true when the path ends with a dot segment: it then names a directory, and a browser
 * would end the resolved path with `/`.
 */
export function appendPath(stack: string[], u: string, s: number, e: number): boolean {
  let seg = s;
  let endsWithDot = false;
  for (let i = s; i <= e; i++) {
    if (i < e && !isPathSlash(u.charCodeAt(i))) continue;
    const dots = dotSegment(u, seg, i);
    endsWithDot = dots !== 0;
    if (dots === 2) stack.pop();
    else if (dots === 0 && (i > seg || stack.length > 0)) stack.push(u.slice(seg, i));
    seg = i + 1;
  }
  return endsWithDot;
}

/**
 * The URL `u[s, e)` with its path part normalised by appendPath from an empty stack and its query
 * and fragment (or the C0 controls and spaces that end it) kept as written: `a/./b/../c.png` ->
 * `a/c.png`, `..\x.png?v=../1` -> `x.png?v=../1`, `a/b/..` -> `a/`. The result never starts with
 * `/`, and pathNeedsNormalising is false for it, so normalising it again changes nothing.
 */
export function normalisePath(u: string, s: number, e: number): string {
  let p = pathEnd(u, s, e);
  if (p === e) p = urlEnd(u, s, e);
  const segments: string[] = [];
  const dir = appendPath(segments, u, s, p);
  const path = segments.join('/');
  return (dir && path !== '' && !path.endsWith('/') ? path + '/' : path) + u.slice(p, e);
}
