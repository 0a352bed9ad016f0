/**
 * Attribute text as the media rewriter (html-rewriter.ts) splices it: where a value sits in its
 * source, how a new value is escaped for the quoting already used, and srcset candidates.
 */

/** HTML's ASCII white space. */
export function isHtmlWs(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d;
}

/**
 * Locates the value inside the raw attribute text `s[start, end)` (name, optional white
 * space, `=`, optional white space, optional quote). Returns `[valueStart, valueEnd, quote]`
 * in `s` coordinates (quote 0 when unquoted), or null for an attribute without a value.
 */
export function valueSpan(s: string, start: number, end: number): [number, number, number] | null {
  // The first name character may be `=` (a parse error that parse5 keeps in the name).
  let i = start + 1;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (isHtmlWs(c) || c === 0x2f || c === 0x3e || c === 0x3d) break;
    i++;
  }
  while (i < end && isHtmlWs(s.charCodeAt(i))) i++;
  if (i >= end || s.charCodeAt(i) !== 0x3d /* = */) return null;
  i++;
  while (i < end && isHtmlWs(s.charCodeAt(i))) i++;
  const q = s.charCodeAt(i);
  // parse5's attribute span ends after the closing quote.
  if (q === 0x22 || q === 0x27) return [i + 1, end - 1, q];
  return [i, end, 0];
}

/** Encodes a new value for the quoting the stored attribute already uses. */
export function encodeAttrValue(v: string, quote: number): string {
  let out = '';
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c === 0x26) out += '&amp;';
    else if (c === 0x22 && quote !== 0x27) out += '&quot;';
    else if (c === 0x27 && quote !== 0x22) out += '&#39;';
    // Unquoted values end at white space or `>` and must not hold `<`, `=` or a backtick.
    else if (quote === 0 && (isHtmlWs(c) || c === 0x3e || c === 0x3c || c === 0x3d || c === 0x60)) {
      out += `&#${c};`;
    } else out += v[i];
  }
  return out;
}

/**
 * Applies `transform` to every candidate URL of a `srcset` value and keeps separators and
 * descriptors byte-for-byte. Candidates are split as rewriteSrcset (media-url.ts) and the HTML
 * spec's srcset parser split them: a `data:` URL's comma stays inside its URL, and commas inside
 * `(...)` in descriptors do not start a new candidate.
 */
export function mapSrcsetUrls(value: string, transform: (url: string) => string): string {
  const n = value.length;
  let out = '';
  let copied = 0; // value[0, copied) is already in `out`
  let pos = 0;
  while (pos < n) {
    let c = value.charCodeAt(pos);
    while (isHtmlWs(c) || c === 0x2c /* , */) {
      if (++pos >= n) break;
      c = value.charCodeAt(pos);
    }
    if (pos >= n) break;
    const urlStart = pos;
    while (pos < n && !isHtmlWs(value.charCodeAt(pos))) pos++;
    let urlEnd = pos;
    // Trailing commas end the candidate and belong to the separator, not the URL.
    let endsWithComma = false;
    while (urlEnd > urlStart && value.charCodeAt(urlEnd - 1) === 0x2c) {
      urlEnd--;
      endsWithComma = true;
    }
    const url = value.slice(urlStart, urlEnd);
    const next = transform(url);
    if (next !== url) {
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
