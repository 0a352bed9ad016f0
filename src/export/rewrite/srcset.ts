/**
 * srcset values (decisions.md D3.3): every candidate URL rewritten, separators and descriptors kept
 * byte for byte. Candidates are split as the HTML spec's srcset parser splits them: a `data:` URL's
 * comma stays inside its URL, and commas inside `(...)` in descriptors do not start a candidate.
 */
import { isAsciiWhitespace } from './ascii.js';

/**
 * Calls `rewrite(value, start, end)` for the span of every candidate URL and splices in what it
 * returns (null: leave that URL as it is). Returns `value` itself when nothing changed.
 */
export function mapSrcsetRanges(value: string, rewrite: (value: string, start: number, end: number) => string | null): string {
  const n = value.length;
  let out = '';
  let copied = 0; // value[0, copied) is already in `out`
  let pos = 0;
  while (pos < n) {
    // Separators between candidates: white space and commas.
    let c = value.charCodeAt(pos);
    while (isAsciiWhitespace(c) || c === 0x2c /* , */) {
      if (++pos >= n) break;
      c = value.charCodeAt(pos);
    }
    if (pos >= n) break;
    const urlStart = pos;
    while (pos < n && !isAsciiWhitespace(value.charCodeAt(pos))) pos++;
    let urlEnd = pos;
    // Trailing commas end the candidate and belong to the separator, not the URL.
    let endsWithComma = false;
    while (urlEnd > urlStart && value.charCodeAt(urlEnd - 1) === 0x2c) {
      urlEnd--;
      endsWithComma = true;
    }
    const next = rewrite(value, urlStart, urlEnd);
    if (next !== null) {
      out += value.slice(copied, urlStart) + next;
      copied = urlEnd;
    }
    if (endsWithComma) continue;
    // Descriptors run until a comma outside parentheses.
    let inParens = false;
    while (pos < n) {
      c = value.charCodeAt(pos);
      if (inParens) {
        if (c === 0x29 /* ) */) inParens = false;
      } else if (c === 0x28 /* ( */) {
        inParens = true;
      } else if (c === 0x2c) {
        break;
      }
      pos++;
    }
  }
  return copied === 0 ? value : out + value.slice(copied);
}

/** Applies `transform` to every candidate URL of a srcset value; `transform` returns its argument to leave a URL alone. */
export function mapSrcsetUrls(value: string, transform: (url: string) => string): string {
  return mapSrcsetRanges(value, (v, start, end) => {
    const url = v.slice(start, end);
    const next = transform(url);
    return next === url ? null : next;
  });
}
