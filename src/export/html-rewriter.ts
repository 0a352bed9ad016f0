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
import { SAXParser, type StartTag } from 'parse5-sax-parser';
import { Token } from 'parse5';
import { mediaUrlKeptRange, rewriteMediaUrl, rewriteSrcset } from './media-url.js';

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

interface Edit {
  start: number;
  end: number;
  text: string;
}

/**
 * The fields of parse5's Tokenizer we read to know which input is final; see boundary().
 * `currentToken` is protected in parse5's types; the split-at-every-position tests fail
 * if a parse5 upgrade changes what it means.
 */
interface TokenizerView {
  preprocessor: { pos: number; droppedBufferSize: number };
  currentToken: { type: Token.TokenType; location: { startOffset: number } | null } | null;
  inForeignNode: boolean;
}

/** The parts of parse5's Tokenizer and Preprocessor the data-state fast path touches. */
interface DataStateView {
  _stateData?: (cp: number) => void;
  preprocessor: { html: string; pos: number; isEol: boolean };
}

/**
 * Text in the data state is most of a document's HTML and cannot start a tag, yet parse5 runs
 * each of its characters through a state function and builds character tokens that this rewriter
 * throws away: 70 % of the tokenizer's time on typical documents. In the data state, a character
 * other than `<`, `&`, NUL or a line break changes nothing but the text, so after one such
 * character the tokenizer may move straight to the next `<`, `&`, NUL, CR, LF or surrogate (the
 * characters whose handling has side effects: tags, references, errors, line and code point
 * bookkeeping). Offsets stay exact, which is all the splicing uses; text events are lost, which
 * nothing here listens to. A parse5 without `_stateData` keeps its own, slower, path; the
 * split-at-every-position and reference tests fail if a parse5 upgrade changes what it means.
 */
/** What ends a run of plain text in the data state (see skipTextInDataState). */
const TEXT_STOP = /[<&\0\r\n\ud800-\udfff]/g;

function skipTextInDataState(tz: DataStateView): void {
  const original = tz._stateData;
  if (typeof original !== 'function') return;
  const pre = tz.preprocessor;
  tz._stateData = function (this: DataStateView, cp: number): void {
    if (cp === 0x3c || cp === 0x26 || cp <= 0 || pre.isEol) {
      original.call(this, cp);
      return;
    }
    const html = pre.html;
    TEXT_STOP.lastIndex = pre.pos + 1;
    const j = TEXT_STOP.exec(html) === null ? html.length : TEXT_STOP.lastIndex - 1;
    // The loop's next advance() reads html[j]; at the end of the input it hibernates there.
    pre.pos = j - 1;
  };
}

/**
 * Drives the SAX parser synchronously: the Transform stream API defers `end()` to a later
 * tick, while the rewriter must return its output from the call that fed the input.
 */
class SyncSaxParser extends SAXParser {
  constructor(onStartTag: (tag: StartTag, foreign: boolean) => void) {
    super({ sourceCodeLocationInfo: true });
    this.on('startTag', (tag: StartTag) => onStartTag(tag, this.view().inForeignNode));
    skipTextInDataState(this.tokenizer as unknown as DataStateView);
  }

  private view(): TokenizerView {
    return this.tokenizer as unknown as TokenizerView;
  }

  // SAXParser merges character tokens into text events, copying a location object per
  // token; that is most of its cost (about 3x on typical content) and text never matters here.
  override onCharacter(): void {}
  override onWhitespaceCharacter(): void {}
  override onNullCharacter(): void {}

  feed(chunk: string, last: boolean): void {
    this.tokenizer.write(chunk, last);
  }

  /**
   * Absolute input offset before which no start tag can still be emitted. A tag being
   * tokenised starts at its `<`; a `<` just read at the end of a chunk may open one.
   * Everything before this offset can be sent on, which bounds memory by the largest token.
   */
  boundary(input: string, inputStart: number): number {
    const tz = this.view();
    let b = tz.preprocessor.droppedBufferSize + tz.preprocessor.pos + 1;
    const ct = tz.currentToken;
    if (ct !== null && ct.type === Token.TokenType.START_TAG && ct.location !== null) {
      b = Math.min(b, ct.location.startOffset);
    } else if (b > inputStart && input.charCodeAt(b - 1 - inputStart) === 0x3c /* < */) {
      b--;
    }
    return Math.max(b, inputStart);
  }
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

function isHtmlWs(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d;
}

/**
 * Locates the value inside the raw attribute text `s[start, end)` (name, optional white
 * space, `=`, optional white space, optional quote). Returns `[valueStart, valueEnd, quote]`
 * in `s` coordinates (quote 0 when unquoted), or null for an attribute without a value.
 */
function valueSpan(s: string, start: number, end: number): [number, number, number] | null {
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
function encodeAttrValue(v: string, quote: number): string {
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
