/**
 * Media URL rewriting inside HTML (decisions.md D3.3-D3.5, export-api.md 2.2 rule 1): the export
 * prefixes stored `contentHtml` for the media proxy, and `import-html` makes a page's URLs
 * root-relative through the same machinery with its own URL rules.
 *
 * parse5's tokenizer (through parse5-sax-parser, which mirrors the tree builder's switches into
 * RCDATA/RAWTEXT/script/PLAINTEXT states and foreign content) decides what is a real start tag.
 * We never serialise its tokens: each changed attribute value is spliced into the original
 * text by source offset, so every other byte is returned as stored (D3.5).
 */
import type { StartTag } from 'parse5-sax-parser';
import type { Token } from 'parse5';
import { encodeAttrValue, mapSrcsetUrls, valueSpan } from './html-attributes.js';
import { SyncSaxParser } from './html-tokenizer.js';
import { mediaUrlKeptRange, rewriteMediaUrl, rewriteSrcset } from './media-url.js';

export { mapSrcsetUrls } from './html-attributes.js';

type AttrKind = 'url' | 'srcset';

/**
 * How the rewriter changes the value of one D3.3 attribute. Both functions get the decoded value
 * (character references resolved) and return it unchanged when nothing is to be rewritten;
 * the rewriter escapes what they return for the attribute's quoting.
 */
export interface UrlRewriteRules {
  /** Rewrites a single-URL value: `src`, `poster`, `data`, an attachment's `href`. */
  url(value: string): string;
  /** Rewrites a `srcset` value, keeping its separators and descriptors. */
  srcset(value: string): string;
}

/** The export's rules (decisions.md D3.1, D3.2); `prefix` must come from normalizeMediaPrefix. */
function prefixRules(prefix: string): UrlRewriteRules {
  return { url: (v) => rewriteMediaUrl(v, prefix), srcset: (v) => rewriteSrcset(v, prefix) };
}

/**
 * Rules that apply `transform` to a URL value and to every candidate URL of a `srcset`, split as
 * mapSrcsetUrls does. `transform` returns its argument unchanged when it leaves a URL alone.
 */
export function urlTransformRules(transform: (url: string) => string): UrlRewriteRules {
  return { url: transform, srcset: (v) => mapSrcsetUrls(v, transform) };
}

/** decisions.md D3.3: element -> attributes rewritten (`a` is gated separately). */
const REWRITTEN_ATTRS: ReadonlyMap<string, ReadonlyMap<string, AttrKind>> = new Map([
  ['img', new Map<string, AttrKind>([['src', 'url'], ['srcset', 'srcset']])],
  ['source', new Map<string, AttrKind>([['src', 'url'], ['srcset', 'srcset']])],
  ['video', new Map<string, AttrKind>([['src', 'url'], ['poster', 'url']])],
  ['audio', new Map<string, AttrKind>([['src', 'url']])],
  ['track', new Map<string, AttrKind>([['src', 'url']])],
  ['embed', new Map<string, AttrKind>([['src', 'url']])],
  ['object', new Map<string, AttrKind>([['data', 'url']])],
  ['a', new Map<string, AttrKind>([['href', 'url']])],
]);

/** A replacement of `html[start, end)` (UTF-16 offsets) by `text`, the new attribute value as written. */
export interface Edit {
  start: number;
  end: number;
  text: string;
}


/**
 * Incremental media URL rewriter for one HTML document (decisions.md D3.3-D3.5).
 * Feed chunks with write(); each call returns the output that is final so far, and end()
 * returns the rest. Any chunking of the same input gives the same concatenated output.
 */
export class HtmlMediaRewriter {
  /**
   * Set for prefix rules only: their output is the prefix plus parts of the value, and the
   * prefix holds nothing that needs escaping, so it can be spliced in without re-encoding.
   */
  private readonly prefix: string | null;
  private readonly rules: UrlRewriteRules;
  private readonly sax: SyncSaxParser;
  /** Input not yet returned; `pending[0]` is input offset `pendingStart`. */
  private pending = '';
  private pendingStart = 0;
  private edits: Edit[] = [];
  private rewritten = 0;
  private ended = false;

  /**
   * A string is the media proxy prefix of decisions.md D3.1, already normalised
   * (normalizeMediaPrefix); other URL rewrites pass their own rules (e.g. urlTransformRules).
   */
  constructor(prefixOrRules: string | UrlRewriteRules) {
    if (typeof prefixOrRules === 'string') {
      this.prefix = prefixOrRules;
      this.rules = prefixRules(prefixOrRules);
    } else {
      this.prefix = null;
      this.rules = prefixOrRules;
    }
    this.sax = new SyncSaxParser((tag, foreign) => this.onStartTag(tag, foreign));
  }

  /** Feeds one chunk; returns the output that no later input can change (decisions.md D3.5). */
  write(chunk: string): string {
    if (this.ended) throw new Error('HtmlMediaRewriter.write after end');
    if (chunk.length === 0) return '';
    this.pending += chunk;
    this.sax.feed(chunk, false);
    return this.flush(this.sax.boundary(this.pending, this.pendingStart));
  }

  /**
   * The edits of a whole document, in order, instead of its output: what write(html) + end()
   * would splice into `html`. For callers that splice into another representation of the same
   * text (document-encoder.ts splices into contentHtml's JSON text). Use on a fresh rewriter only.
   */
  editsOf(html: string): readonly Edit[] {
    if (this.ended || this.pendingStart !== 0 || this.pending !== '') throw new Error('HtmlMediaRewriter.editsOf on a used rewriter');
    this.ended = true;
    this.pending = html;
    this.sax.feed(html, true);
    return this.edits;
  }

  /**
   * How many attribute values have been rewritten so far, counted when their tag is read;
   * all of them are in the output once end() has returned.
   */
  get rewrittenCount(): number {
    return this.rewritten;
  }

  /** Ends the input; a tag left open at EOF is not a tag (eof-in-tag) and passes through. */
  end(): string {
    if (this.ended) return '';
    this.ended = true;
    this.sax.feed('', true);
    return this.flush(this.pendingStart + this.pending.length);
  }

  private flush(upTo: number): string {
    if (upTo <= this.pendingStart) return '';
    const base = this.pendingStart;
    let out = '';
    let pos = base;
    let keep = 0;
    for (const e of this.edits) {
      // Edits come from emitted tags, which lie before the boundary; keep any that do not.
      if (e.end > upTo) {
        this.edits[keep++] = e;
        continue;
      }
      out += this.pending.slice(pos - base, e.start - base) + e.text;
      pos = e.end;
    }
    this.edits.length = keep;
    out += this.pending.slice(pos - base, upTo - base);
    this.pending = this.pending.slice(upTo - base);
    this.pendingStart = upTo;
    return out;
  }

  private onStartTag(tag: StartTag, foreign: boolean): void {
    // An `<img>` inside <svg> leaves foreign content, so it arrives here as HTML; what stays
    // foreign (e.g. <svg><video>) is not an HTML media element.
    if (foreign) return;
    const rules = REWRITTEN_ATTRS.get(tag.tagName);
    // parse5-sax-parser types the location as Location, but start tags carry attribute spans.
    const locs = (tag.sourceCodeLocation as Token.LocationWithAttributes | null | undefined)?.attrs;
    if (rules === undefined || locs === undefined) return;
    if (tag.tagName === 'a' && !isAttachmentLink(tag)) return;
    // parse5 keeps only the first of duplicate attributes, as browsers do, so the
    // duplicates are left untouched.
    const tagEdits: Edit[] = [];
    for (const attr of tag.attrs) {
      const kind = rules.get(attr.name);
      const loc = locs[attr.name];
      if (kind === undefined || loc === undefined) continue;
      const edit = this.attrEdit(attr.value, loc.startOffset, loc.endOffset, kind);
      if (edit !== null) tagEdits.push(edit);
    }
    if (tagEdits.length > 1) tagEdits.sort((x, y) => x.start - y.start);
    for (const e of tagEdits) this.edits.push(e);
    this.rewritten += tagEdits.length;
  }

  /**
   * The edit replacing the raw value text of one attribute, or null when the decoded value
   * needs no rewrite. `start`/`end` span the whole attribute, name to closing quote.
   */
  private attrEdit(decoded: string, start: number, end: number, kind: AttrKind): Edit | null {
    const next = kind === 'url' ? this.rules.url(decoded) : this.rules.srcset(decoded);
    if (next === decoded) return null;
    const span = valueSpan(this.pending, start - this.pendingStart, end - this.pendingStart);
    if (span === null) return null;
    const [vs, ve, quote] = span;
    const raw = this.pending.slice(vs, ve);
    const abs = { start: vs + this.pendingStart, end: ve + this.pendingStart };
    const literal = this.prefix !== null;
    if (raw === decoded) return { ...abs, text: literal ? next : encodeAttrValue(next, quote) };
    if (raw.indexOf('&') === -1) {
      // Without character references the raw value differs from the decoded one only by the
      // tokenizer's CR and NUL normalisation, and rewriting the raw text keeps those as stored
      // (a CRLF between srcset candidates stays CRLF).
      const text = kind === 'url' ? this.rules.url(raw) : this.rules.srcset(raw);
      return { ...abs, text: literal ? text : encodeAttrValue(text, quote) };
    }
    if (this.prefix !== null && kind === 'url') {
      // Usual case: only the kept middle holds entities, and the stripped white space,
      // `./` and `/` are literal, so the prefix goes in and the raw middle stays as stored.
      // A path that D3.7 normalised has no such range (null): its segments no longer line up
      // with the raw text, so it is encoded below instead.
      const kept = mediaUrlKeptRange(decoded, this.prefix);
      if (kept !== null) {
        const lead = decoded.slice(0, kept[0]);
        const trail = decoded.slice(kept[1]);
        if (raw.length >= lead.length + trail.length && raw.startsWith(lead) && raw.endsWith(trail)) {
          return { ...abs, text: this.prefix + raw.slice(lead.length, raw.length - trail.length) };
        }
      }
    }
    return { ...abs, text: encodeAttrValue(next, quote) };
  }
}

/** decisions.md D3.3: an `a` is media only as a download or an attachment. */
function isAttachmentLink(tag: StartTag): boolean {
  for (const attr of tag.attrs) {
    if (attr.name === 'download') return true;
    if (attr.name === 'data-type' && attr.value === 'attachment') return true;
  }
  return false;
}


/**
 * A media tag name after `<` (ASCII case-insensitive, `image` is parsed as `img`), then a
 * character that ends a tag name (white space, `/`, `>`) or the end of the text.
 */
const MEDIA_TAG = /<(?:img|image|source|video|audio|track|embed|object)(?:[\t\n\f\r />]|$)/i;
const ANCHOR_TAG = /<a(?:[\t\n\f\r />]|$)/i;
const ANCHOR_MARKERS = /download|data-type/i;

/**
 * Cheap pre-check for decisions.md D3.3 with no false negatives: false only when no `<` is
 * followed by a media tag name and a tag-name terminator. An `a` only counts when the text holds
 * `download` or `data-type` anywhere: attribute names cannot be written with character references,
 * so without either word no link is an attachment. Most documents have ordinary links and no
 * media, and skip the tokenizer. One regular expression scan instead of a loop over every `<`.
 */
export function mayNeedRewrite(html: string): boolean {
  return MEDIA_TAG.test(html) || (ANCHOR_MARKERS.test(html) && ANCHOR_TAG.test(html));
}

/**
 * Rewrites media URLs in a whole HTML string (decisions.md D3.3-D3.5); same result as one
 * HtmlMediaRewriter write + end. A prefix must already be normalised (D3.1).
 */
export function rewriteHtml(html: string, prefixOrRules: string | UrlRewriteRules): string {
  if (!mayNeedRewrite(html)) return html;
  const rw = new HtmlMediaRewriter(prefixOrRules);
  return rw.write(html) + rw.end();
}
