/** Media URL rewriting in HTML (D3.3-D3.5): parse5 finds start tags; values are spliced in, other bytes kept. */
import type { StartTag } from 'parse5-sax-parser';
import type { Token } from 'parse5';
import { encodeAttrValue, valueSpan } from './html-attributes.js';
import { SyncSaxParser } from './html-tokenizer.js';
import { mediaPreCheck, mayNeedRewrite, rewrittenAttrsOf, type AttrKind } from './media-attributes.js';
import { mediaUrlKeptRange, rewriteMediaUrl, rewriteSrcset } from './media-url.js';
import { mapSrcsetUrls } from './srcset.js';

export { mayNeedRewrite };

/** How one D3.3 attribute value changes: decoded value in, the same string back when unchanged. */
export interface UrlRewriteRules {
  url(value: string): string;
  srcset(value: string): string;
}

function prefixRules(prefix: string): UrlRewriteRules {
  return { url: (v) => rewriteMediaUrl(v, prefix), srcset: (v) => rewriteSrcset(v, prefix) };
}

/** Rules applying `transform` to a URL and to each srcset candidate; it returns its argument to leave a URL alone. */
export function urlTransformRules(transform: (url: string) => string): UrlRewriteRules {
  return { url: transform, srcset: (v) => mapSrcsetUrls(v, transform) };
}

/** A replacement of `html[start, end)` (UTF-16 offsets) by `text`, the new attribute value as written. */
export interface Edit {
  start: number;
  end: number;
  text: string;
}

/** Parsers whose document ended, for the next rewriter: a thread plans its documents one after another, so a few do. */
const idleParsers: SyncSaxParser[] = [];
const IDLE_PARSERS = 4;

function parserFor(onStartTag: (tag: StartTag, foreign: boolean) => void): SyncSaxParser {
  const sax = idleParsers.pop();
  if (sax === undefined) return new SyncSaxParser(onStartTag);
  sax.reset(onStartTag);
  return sax;
}

/** The rewriter of one HTML document: edits by source offset, in order, fed whole (editsOf) or in pieces (write). */
export class HtmlMediaRewriter {
  /** Prefix rules only: the prefix needs no escaping, so it is spliced in as is. */
  private readonly prefix: string | null;
  private readonly rules: UrlRewriteRules;
  private readonly sax: SyncSaxParser;
  private readonly onEdit: (edit: Edit) => void;
  private readonly edits: Edit[] = [];
  private count = 0;
  private started = false;
  private done = false;
  private window = '';
  private windowStart = 0;
  private lastTagEnd = 0;

  /** A normalised media prefix (D3.1) or other rules; with `onEdit`, edits go there instead of being collected. */
  constructor(prefixOrRules: string | UrlRewriteRules, onEdit?: (edit: Edit) => void) {
    if (typeof prefixOrRules === 'string') {
      this.prefix = prefixOrRules;
      this.rules = prefixRules(prefixOrRules);
    } else {
      this.prefix = null;
      this.rules = prefixOrRules;
    }
    this.onEdit = onEdit ?? ((e) => this.edits.push(e));
    this.sax = parserFor((tag, foreign) => this.onStartTag(tag, foreign));
  }

  /** Feeds the next piece; a tag left open waits for it, and at the end is no tag (eof-in-tag). */
  write(chunk: string, last: boolean): void {
    if (this.done) throw new Error('HtmlMediaRewriter: the document has ended');
    this.started = true;
    if (this.lastTagEnd > this.windowStart) {
      this.window = this.window.slice(this.lastTagEnd - this.windowStart);
      this.windowStart = this.lastTagEnd;
    }
    this.window += chunk;
    this.sax.tokenize(chunk, last);
    if (last) {
      // Its last start tag was handled in tokenize: the parser can take another document.
      this.done = true;
      this.sax.release();
      if (idleParsers.length < IDLE_PARSERS) idleParsers.push(this.sax);
    }
  }

  editsOf(html: string): readonly Edit[] {
    if (this.started) throw new Error('HtmlMediaRewriter: one document per instance');
    this.write(html, true);
    return this.edits;
  }

  rewrite(html: string): string {
    let out = '';
    let pos = 0;
    for (const e of this.editsOf(html)) {
      out += html.slice(pos, e.start) + e.text;
      pos = e.end;
    }
    return pos === 0 ? html : out + html.slice(pos);
  }

  get rewrittenCount(): number {
    return this.count;
  }

  private text(start: number, end: number): string {
    return this.window.slice(start - this.windowStart, end - this.windowStart);
  }

  private onStartTag(tag: StartTag, foreign: boolean): void {
    // parse5-sax-parser types the location as Location, but start tags carry attribute spans.
    const loc = tag.sourceCodeLocation as Token.LocationWithAttributes | null | undefined;
    if (loc) this.lastTagEnd = loc.endOffset;
    // An <img> in <svg> arrives as HTML; what stays foreign (<svg><video>) is not HTML media.
    const rules = rewrittenAttrsOf(tag.tagName, tag.attrs, foreign);
    const locs = loc?.attrs;
    if (rules === undefined || locs === undefined) return;
    // parse5 keeps only the first of duplicate attributes (as browsers do); the rest stay untouched.
    const tagEdits: Edit[] = [];
    for (const attr of tag.attrs) {
      const kind = rules.get(attr.name);
      const attrLoc = locs[attr.name];
      if (kind === undefined || attrLoc === undefined) continue;
      const edit = this.attrEdit(attr.value, attrLoc.startOffset, attrLoc.endOffset, kind);
      if (edit !== null) tagEdits.push(edit);
    }
    if (tagEdits.length > 1) tagEdits.sort((x, y) => x.start - y.start);
    for (const e of tagEdits) {
      this.count++;
      this.onEdit(e);
    }
  }

  private attrEdit(decoded: string, start: number, end: number, kind: AttrKind): Edit | null {
    const next = kind === 'url' ? this.rules.url(decoded) : this.rules.srcset(decoded);
    if (next === decoded) return null;
    const attr = this.text(start, end);
    const span = valueSpan(attr, 0, attr.length);
    if (span === null) return null;
    const [vs, ve, quote] = span;
    const raw = attr.slice(vs, ve);
    const abs = { start: start + vs, end: start + ve };
    const literal = this.prefix !== null;
    if (raw === decoded) return { ...abs, text: literal ? next : encodeAttrValue(next, quote) };
    if (raw.indexOf('&') === -1) {
      // No references: raw differs from decoded only by CR/NUL normalisation, kept as stored.
      const text = kind === 'url' ? this.rules.url(raw) : this.rules.srcset(raw);
      return { ...abs, text: literal ? text : encodeAttrValue(text, quote) };
    }
    if (this.prefix !== null && kind === 'url') {
      // Only the kept middle holds references and stays as stored (a D3.7-normalised path has none).
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

// contentHtml as JSON text: a tag name also ends at `\` or `"`; escaping never touches `<` or letters.
const jsonPreCheck = mediaPreCheck('\\t\\n\\f\\r />"\\\\');

/** Whether contentHtml's JSON text `json` may hold a URL that D3.3 rewrites (`""` is never flagged). */
export function jsonHtmlMayNeedRewrite(json: Buffer): boolean {
  return jsonPreCheck(json.toString('latin1'));
}

export function rewriteHtml(html: string, prefixOrRules: string | UrlRewriteRules): string {
  return mayNeedRewrite(html) ? new HtmlMediaRewriter(prefixOrRules).rewrite(html) : html;
}
