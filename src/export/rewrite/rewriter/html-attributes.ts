/** Attribute text as html-rewriter.ts splices it: where a value sits, and escaping for its quoting. */
import { isAsciiWhitespace } from './ascii.js';

/** `[valueStart, valueEnd, quote]` (quote 0: unquoted) of the value in attribute text `s[start, end)`, or null. */
export function valueSpan(s: string, start: number, end: number): [number, number, number] | null {
  // The first name character may be `=` (a parse error that parse5 keeps in the name).
  let i = start + 1;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (isAsciiWhitespace(c) || c === 0x2f || c === 0x3e || c === 0x3d) break;
    i++;
  }
  while (i < end && isAsciiWhitespace(s.charCodeAt(i))) i++;
  if (i >= end || s.charCodeAt(i) !== 0x3d /* = */) return null;
  i++;
  while (i < end && isAsciiWhitespace(s.charCodeAt(i))) i++;
  const q = s.charCodeAt(i);
  if (q === 0x22 || q === 0x27) return [i + 1, end - 1, q];
  return [i, end, 0];
}

export function encodeAttrValue(v: string, quote: number): string {
  let out = '';
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c === 0x26) out += '&amp;';
    else if (c === 0x22 && quote !== 0x27) out += '&quot;';
    else if (c === 0x27 && quote !== 0x22) out += '&#39;';
    // Unquoted values end at white space or `>` and must not hold `<`, `=` or a backtick.
    else if (quote === 0 && (isAsciiWhitespace(c) || c === 0x3e || c === 0x3c || c === 0x3d || c === 0x60)) {
      out += `&#${c};`;
    } else out += v[i];
  }
  return out;
}
