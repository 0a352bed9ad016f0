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
import { encodeAttrValue, valueSpan } from './html-attributes.js';
import { SyncSaxParser } from './html-tokenizer.js';
import { mediaUrlKeptRange, rewriteMediaUrl, rewriteSrcset } from './media-url.js';
import { mapSrcsetUrls } from './srcset.js';

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
 * The media URL rewriter for one whole HTML document (decisions.md D3.3-D3.5): finds the values to
 * rewrite with parse5's tokenizer and returns them as edits by source offset. One document per
 * instance.
 */
export class HtmlMediaRewriter {
  /**
   * Set for prefix rules only: their output is the prefix plus parts of the value, and the
   * prefix holds nothing that needs escaping, so it can be spliced in without re-encoding.
   */
  private readonly prefix: string | null;
  private readonly rules: UrlRewriteRules;
  private readonly sax: SyncSaxParser;
  private html: string | null = null;
  private readonly edits: Edit[] = [];

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

  /**
   * The edits of document `html`, in order: for callers that splice them into another
   * representation of the same text (document-encoder.ts splices into contentHtml's JSON text).
   * A tag left open at the end is not a tag (eof-in-tag) and passes through. Throws when called twice.
   */
  editsOf(html: string): readonly Edit[] {
    if (this.html !== null) throw new Error('HtmlMediaRewriter: one document per instance');
    this.html = html;
    this.sax.feed(html);
    return this.edits;
  }

  /** Document `html` with its media URLs rewritten; every other byte as it was (D3.5). Throws when called twice. */
  rewrite(html: string): string {
    let out = '';
    let pos = 0;
    for (const e of this.editsOf(html)) {
      out += html.slice(pos, e.start) + e.text;
      pos = e.end;
    }
    return pos === 0 ? html : out + html.slice(pos);
  }

  /** How many attribute values were rewritten. */
  get rewrittenCount(): number {
    return this.edits.length;
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
  }

  /**
   * The edit replacing the raw value text of one attribute, or null when the decoded value
   * needs no rewrite. `start`/`end` span the whole attribute, name to closing quote.
   */
  private attrEdit(decoded: string, start: number, end: number, kind: AttrKind): Edit | null {
    const next = kind === 'url' ? this.rules.url(decoded) : this.rules.srcset(decoded);
    if (next === decoded) return null;
    const html = this.html!;
    const span = valueSpan(html, start, end);
    if (span === null) return null;
    const [vs, ve, quote] = span;
    const raw = html.slice(vs, ve);
    const abs = { start: vs, end: ve };
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


/** D3.3's media tag names as they may be written after `<` (`image` is parsed as `img`); `a` is gated apart. */
const MEDIA_TAG_NAMES = [...REWRITTEN_ATTRS.keys(), 'image'].filter((name) => name !== 'a').join('|');
const ANCHOR_MARKERS = /download|data-type/i;

/**
 * A cheap pre-check for decisions.md D3.3 with no false negatives, over HTML or a text that holds
 * it (escaped JSON): true when a media tag name follows `<` and is followed by one of the
 * characters in `terminators` (a regular expression class body: what ends a tag name in that
 * text) or the end of the text. An `a` only counts when the text holds `download` or `data-type`
 * anywhere: attribute names cannot be written with character references, so without either word
 * no link is an attachment. Most documents have ordinary links and no media, and skip the
 * tokenizer: one regular expression scan instead of a loop over every `<`.
 */
export function mediaPreCheck(terminators: string): (text: string) => boolean {
  const media = new RegExp(`<(?:${MEDIA_TAG_NAMES})(?:[${terminators}]|$)`, 'i');
  const anchor = new RegExp(`<a(?:[${terminators}]|$)`, 'i');
  return (text) => media.test(text) || (ANCHOR_MARKERS.test(text) && anchor.test(text));
}

/** The pre-check over HTML: a tag name ends at white space, `/` or `>`. */
export const mayNeedRewrite = mediaPreCheck('\\t\\n\\f\\r />');

/**
 * Rewrites media URLs in a whole HTML string (decisions.md D3.3-D3.5), skipping the tokenizer
 * when the pre-check finds no media tag. A prefix must already be normalised (D3.1).
 */
export function rewriteHtml(html: string, prefixOrRules: string | UrlRewriteRules): string {
  return mayNeedRewrite(html) ? new HtmlMediaRewriter(prefixOrRules).rewrite(html) : html;
}
