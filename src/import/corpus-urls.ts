/**
 * Media URLs of imported pages made root-relative, so that one media proxy prefix serves a whole
 * corpus (`library/os.html`'s `../_images/x.png` becomes `/_images/x.png`). Only the changed
 * attribute values are spliced into the page; every other byte stays as written.
 */
import type { Token } from 'parse5';
import { SAXParser } from 'parse5-sax-parser';
import type { StartTag } from 'parse5-sax-parser';

/**
 * Resolves a media/attachment URL found in page `pagePath` (relative to the corpus root, e.g.
 * `library/os.html`) into a root-relative URL (`../_images/x.png` -> `/_images/x.png`).
 * URLs with a scheme, protocol-relative (`//`), fragment-only (`#`), already root-relative or
 * empty are returned unchanged; `..` above the root is clamped to the root. `?query` and
 * `#fragment` are kept as written; surrounding whitespace is kept too.
 */
export function resolveCorpusUrl(url: string, pagePath: string): string {
  const m = /^([\t\n\f\r ]*)(.*?)([\t\n\f\r ]*)$/s.exec(url);
  const lead = m?.[1] ?? '';
  const core = m?.[2] ?? url;
  const trail = m?.[3] ?? '';
  if (
    core === '' ||
    core.startsWith('/') ||
    core.startsWith('#') ||
    // Browsers read `\\host` like `//host` for http(s), so it is not a path either.
    core.startsWith('\\') ||
    /^[A-Za-z][A-Za-z0-9+.-]*:/.test(core)
  ) {
    return url;
  }
  const cut = core.search(/[?#]/);
  const path = cut === -1 ? core : core.slice(0, cut);
  const suffix = cut === -1 ? '' : core.slice(cut);

  const segments = pagePath.replace(/^\/+/, '').split('/');
  const file = segments.pop() ?? '';
  // `?q` alone refers to the page itself, as in a browser.
  if (path === '') return `${lead}/${[...segments, file].join('/')}${suffix}${trail}`;

  const parts = path.split('/');
  for (const part of parts) {
    // The URL standard also treats percent-encoded dots as dot segments; clamping must see them.
    const p = part.toLowerCase();
    if (p === '.' || p === '%2e') continue;
    if (p === '..' || p === '.%2e' || p === '%2e.' || p === '%2e%2e') {
      segments.pop();
      continue;
    }
    segments.push(part);
  }
  const last = parts[parts.length - 1]?.toLowerCase() ?? '';
  const dirLike = last === '' || last === '.' || last === '..' || last === '%2e' || last === '.%2e' || last === '%2e.' || last === '%2e%2e';
  const joined = segments.filter((s, i) => s !== '' || i === segments.length - 1).join('/');
  const resolved = `/${joined}${dirLike && joined !== '' && !joined.endsWith('/') ? '/' : ''}`;
  return `${lead}${resolved}${suffix}${trail}`;
}

// ---------------------------------------------------------------------------------------------
// Records


// ---------------------------------------------------------------------------------------------
// URL rewriting

/** Which attributes of which elements hold media URLs; `a href` only for attachments. */
const URL_ATTRS: Record<string, readonly string[]> = {
  img: ['src', 'srcset'],
  source: ['src', 'srcset'],
  video: ['src', 'poster'],
  audio: ['src'],
  track: ['src'],
  embed: ['src'],
  object: ['data'],
  a: ['href'],
};

interface Splice {
  start: number;
  end: number;
  text: string;
}

/**
 * Rewrites media URLs in `html` (a body's inner HTML) to root-relative ones, splicing only the
 * changed attribute values so every other byte stays as written.
 */
export async function rewriteMediaUrls(html: string, pagePath: string): Promise<{ html: string; count: number }> {
  // Cheap pre-check: most pages of a manual have no media at all, and the SAX pass costs a parse.
  if (!/<(img|source|video|audio|track|embed|object|a)[\s/>]/i.test(html)) return { html, count: 0 };

  const splices: Splice[] = [];
  const parser = new SAXParser({ sourceCodeLocationInfo: true });
  parser.on('startTag', (tag: StartTag) => {
    const names = URL_ATTRS[tag.tagName];
    // Start-tag tokens carry attribute locations; the SAX typings only declare the base shape.
    const loc = tag.sourceCodeLocation as Token.LocationWithAttributes | null | undefined;
    if (!names || !loc?.attrs) return;
    if (tag.tagName === 'a' && !tag.attrs.some((a) => a.name === 'download' || (a.name === 'data-type' && a.value === 'attachment'))) {
      return;
    }
    const seen = new Set<string>();
    for (const attr of tag.attrs) {
      // The tokenizer drops duplicate attributes, so only the first one is the element's value.
      if (attr.prefix || seen.has(attr.name) || !names.includes(attr.name)) continue;
      seen.add(attr.name);
      const aloc = loc.attrs[attr.name];
      if (!aloc) continue;
      const rewrite = attr.name === 'srcset' ? (v: string) => rewriteSrcset(v, pagePath) : (v: string) => resolveCorpusUrl(v, pagePath);
      if (rewrite(attr.value) === attr.value) continue;
      const splice = valueSplice(html, aloc.startOffset, aloc.endOffset, attr.value, rewrite);
      if (splice) splices.push(splice);
    }
  });
  // SAXParser is a Transform stream: it passes the text through, and with nobody reading it
  // would stall once its buffer is full. Flowing with no 'data' listener drops the text instead.
  parser.resume();
  await new Promise<void>((resolve, reject) => {
    parser.once('error', reject);
    parser.once('finish', resolve);
    parser.end(html);
  });

  if (splices.length === 0) return { html, count: 0 };
  splices.sort((a, b) => a.start - b.start);
  const out: string[] = [];
  let at = 0;
  for (const s of splices) {
    out.push(html.slice(at, s.start), s.text);
    at = s.end;
  }
  out.push(html.slice(at));
  return { html: out.join(''), count: splices.length };
}

/**
 * Locates the value inside the attribute source `html[start, end)` (`name = "value"`, `'value'`
 * or unquoted) and returns the replacement for just that value. The raw text is rewritten when it
 * holds no character reference (keeping CRLF and the like as written); otherwise the decoded value
 * is rewritten and re-escaped.
 */
function valueSplice(
  html: string,
  start: number,
  end: number,
  decoded: string,
  rewrite: (v: string) => string,
): Splice | undefined {
  const src = html.slice(start, end);
  const eq = src.indexOf('=');
  if (eq === -1) return undefined;
  let vs = eq + 1;
  while (vs < src.length && /[\t\n\f\r ]/.test(src[vs]!)) vs++;
  const quote = src[vs] === '"' || src[vs] === "'" ? src[vs]! : '';
  const valueStart = vs + quote.length;
  const valueEnd = quote && src.endsWith(quote) && src.length > valueStart ? src.length - 1 : src.length;
  const raw = src.slice(valueStart, valueEnd);
  let text: string;
  if (!raw.includes('&')) {
    text = rewrite(raw);
  } else {
    text = rewrite(decoded).replace(/&/g, '&amp;');
    if (quote === '"') text = text.replace(/"/g, '&quot;');
    if (quote === "'") text = text.replace(/'/g, '&#39;');
  }
  if (quote === '' && /[\t\n\f\r "'=<>`]/.test(text)) {
    return { start: start + valueStart, end: start + valueEnd, text: `"${text.replace(/"/g, '&quot;')}"` };
  }
  return { start: start + valueStart, end: start + valueEnd, text };
}

/**
 * Rewrites each candidate URL of a `srcset`, leaving descriptors, commas and whitespace as they
 * are. Follows the HTML candidate-splitting rules closely enough for real pages: a URL is a run of
 * non-whitespace; trailing commas belong to the separator; descriptors run to the next comma
 * outside parentheses.
 */
function rewriteSrcset(value: string, pagePath: string): string {
  const out: string[] = [];
  let i = 0;
  const n = value.length;
  const ws = (c: string | undefined) => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f';
  while (i < n) {
    const sepStart = i;
    while (i < n && (ws(value[i]) || value[i] === ',')) i++;
    out.push(value.slice(sepStart, i));
    if (i >= n) break;
    const urlStart = i;
    while (i < n && !ws(value[i])) i++;
    let urlEnd = i;
    while (urlEnd > urlStart && value[urlEnd - 1] === ',') urlEnd--;
    out.push(resolveCorpusUrl(value.slice(urlStart, urlEnd), pagePath), value.slice(urlEnd, i));
    if (urlEnd < i) continue; // the URL's trailing comma already ended this candidate
    const descStart = i;
    let depth = 0;
    while (i < n) {
      const c = value[i];
      if (c === '(') depth++;
      else if (c === ')') depth = Math.max(0, depth - 1);
      else if (c === ',' && depth === 0) break;
      i++;
    }
    out.push(value.slice(descStart, i));
  }
  return out.join('');
}
