/** srcset values (D3.3) split as the HTML spec's parser does: commas in `data:` URLs and `(...)` start no candidate. */
import { isAsciiWhitespace } from './ascii.js';

/** Splices `rewrite(value, start, end)` over each candidate URL (null: leave it); `value` itself when unchanged. */
export function mapSrcsetRanges(
  value: string,
  rewrite: (value: string, start: number, end: number) => string | null,
): string {
  const n = value.length;
  let out = '';
  let copied = 0; // value[0, copied) is already in `out`
  let pos = 0;
  while (pos < n) {
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

export function mapSrcsetUrls(value: string, transform: (url: string) => string): string {
  return mapSrcsetRanges(value, (v, start, end) => {
    const url = v.slice(start, end);
    const next = transform(url);
    return next === url ? null : next;
  });
}
