/** Dot segments as browsers read them (D3.7): tab/LF/CR ignored, `\` is `/`, `%2e` is `.` (or `.%2E\..\x` climbs out). */

function isTabOrNewline(c: number): boolean {
  return c === 0x09 || c === 0x0a || c === 0x0d;
}

function skipTabs(u: string, i: number, e: number): number {
  while (i < e && isTabOrNewline(u.charCodeAt(i))) i++;
  return i;
}

export function isPathSlash(c: number): boolean {
  return c === 0x2f || c === 0x5c;
}

/** 1 when `u[s, e)` is `.`, 2 when `..`, else 0, read as the URL parser reads it. */
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

/** `e` moved back over C0 controls and spaces, which the URL parser strips from the end (`..\x01` is `..`). */
function urlEnd(u: string, s: number, e: number): number {
  while (e > s && u.charCodeAt(e - 1) <= 0x20) e--;
  return e;
}

function pathEnd(u: string, s: number, e: number): number {
  for (let i = s; i < e; i++) {
    const c = u.charCodeAt(i);
    if (c === 0x3f /* ? */ || c === 0x23 /* # */) return i;
  }
  return e;
}

/** The longest run of path segments from `lastIndex` none of which can be a dot segment; stops at white space. */
const PLAIN_SEGMENTS = /(?:[^\\/?#.%\x00-\x20][^\\/?#\x00-\x20]*)?(?:\/(?:[^\\/?#.%\x00-\x20][^\\/?#\x00-\x20]*)?)*/y;

/** Whether the path part of `u[s, e)` holds a `\` or a dot segment, the two things D3.7 changes. */
export function pathNeedsNormalising(u: string, s: number, e: number): boolean {
  PLAIN_SEGMENTS.lastIndex = s;
  PLAIN_SEGMENTS.test(u);
  const plainEnd = PLAIN_SEGMENTS.lastIndex;
  if (plainEnd >= e) return false;
  const c = u.charCodeAt(plainEnd);
  return c !== 0x3f /* ? */ && c !== 0x23 /* # */ && hasBackslashOrDotSegment(u, s, e);
}

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

function isDotSegment(u: string, s: number, e: number): boolean {
  if (s >= e) return false;
  const c = u.charCodeAt(s);
  return (c === 0x2e || c === 0x25 || c <= 0x20) && dotSegment(u, s, e) !== 0;
}

/** Appends path `u[s, e)` to `stack` (D3.7), never climbing above it; true when it ends with a dot segment. */
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

/** `u[s, e)` with its path normalised by appendPath and the rest kept: `a/./b/../c.png` -> `a/c.png`. Idempotent. */
export function normalisePath(u: string, s: number, e: number): string {
  let p = pathEnd(u, s, e);
  if (p === e) p = urlEnd(u, s, e);
  const segments: string[] = [];
  const dir = appendPath(segments, u, s, p);
  const path = segments.join('/');
  return (dir && path !== '' && !path.endsWith('/') ? path + '/' : path) + u.slice(p, e);
}
