/**
 * One page of `import-html` in one tokenizer pass without a tree; its text is the source between two
 * tokens, decoded as the tokenizer's state says, never taken from character tokens.
 */
import { decodeHTML } from 'entities';
import { TokenizerMode } from 'parse5';
import type { Comment, Doctype, EndTag, StartTag } from 'parse5-sax-parser';
import { SyncSaxParser } from '../export/rewrite/rewriter/html-tokenizer.js';
import { rewriteCorpusTags } from './corpus-urls.js';
import {
  SKIPPED,
  BLOCKS,
  HEAD_TAGS,
  BODY_OPENING_END_TAGS,
  HEADINGS,
  MEDIA,
  VOID,
  SCOPES,
  CELLS,
  CLOSE_CELL,
  DROPPED_IN_DATA,
  TAG_AT_EOF,
} from './html-tags.js';
import { cdata, collapse, isSpace, TextBuilder, type Loc } from './page-text.js';

/** What a single page contributes to its record; `contentStr` is null when the body has no text. */
export interface ParsedPage {
  name: string;
  contentHtml: string;
  contentStr: string | null;
}

class PageTokenizer extends SyncSaxParser {
  get state(): number {
    return this.tokenizer.state;
  }

  get inForeignNode(): boolean {
    return this.tokenizer.inForeignNode;
  }
}

/**
 * Never throws on malformed HTML. name: the first HTML <title>'s text, else the body's first <h1>'s,
 * else `fallbackName`; contentHtml: the source from `<body>` (or the first content) to the first
 * `</body>` (or the last content), media URLs made root-relative; contentStr: the text without
 * script/style/noscript/template, blocks on lines, cells spaced, whitespace collapsed.
 */
export function pageFromHtml(html: string, pagePath: string, fallbackName: string): ParsedPage {
  const reader = new PageReader(html);
  reader.read();
  const { name: title, bodyStart, bodyEnd, text } = reader;
  let name = title === null ? '' : collapse(title);
  if (name === '') name = collapse(reader.heading ?? '');
  if (name === '') name = collapse(fallbackName);
  const start = bodyStart ?? (reader.frameset ? 0 : html.length);
  const end = reader.frameset && bodyStart === null ? html.length : Math.max(start, bodyEnd ?? start);
  const media = reader.media.filter(([s, e]) => s >= start && e <= end);
  const { html: contentHtml } = rewriteCorpusTags(html, start, end, media, pagePath);
  return { name, contentHtml, contentStr: text === '' ? null : text };
}

class PageReader {
  private readonly sax: PageTokenizer;
  /** End of the last token: the text not yet read starts here. */
  private pos = 0;
  /** How the text after the last token is read (a TokenizerMode). */
  private mode: number = TokenizerMode.DATA;
  private foreign = false;
  /** Open elements whose text is left out, innermost last. */
  private readonly skipped: string[] = [];
  private readonly out: TextBuilder;
  private afterHtml = false;
  private bodyClosed = false;
  private titleSeen = false;
  private titleOpen = false;
  private inHeading = false;
  /** Elements open inside the first <h1>, and how many of them are headings. */
  private headingDepth = 0;
  private nestedHeadings = 0;
  private headingParts: string[] = [];
  /** Open table parts and other elements that bound the scope of </body>, innermost last. */
  private readonly scopes: string[] = [];

  name: string | null = null;
  heading: string | null = null;
  bodyStart: number | null = null;
  bodyEnd: number | null = null;
  /** Whether a <frameset> took the body's place. */
  frameset = false;
  readonly media: [number, number][] = [];
  text = '';

  constructor(private readonly html: string) {
    this.out = new TextBuilder(html.length);
    this.sax = new PageTokenizer((tag, foreignAfter) => this.onStartTag(tag, foreignAfter));
    this.sax.on('endTag', (tag: EndTag) => this.onEndTag(tag));
    this.sax.on('comment', (c: Comment) => this.onOther(c.sourceCodeLocation, true));
    this.sax.on('doctype', (d: Doctype) => this.onOther(d.sourceCodeLocation, false));
  }

  read(): void {
    this.sax.tokenize(this.html, true);
    let end = this.html.length;
    if (this.mode === TokenizerMode.DATA) {
      const cut = this.html.slice(this.pos).search(TAG_AT_EOF);
      if (cut !== -1) end = this.pos + cut;
    }
    this.textUntil(end);
    // A tag cut off by the end is no text, but its bytes stay in the body's HTML.
    if (end < this.html.length) this.bodyContent(this.html.length);
    if (this.inHeading) this.endHeading();
    this.text = this.out.toString();
  }

  private get inBody(): boolean {
    return this.bodyStart !== null;
  }

  private openBody(at: number): void {
    if (this.bodyStart === null && !this.frameset) this.bodyStart = at;
  }

  /** The body's content reaches `end`, unless </body> came first. */
  private bodyContent(end: number): void {
    if (this.bodyStart !== null && !this.bodyClosed) this.bodyEnd = end;
  }

  private onStartTag(tag: StartTag, foreignAfter: boolean): void {
    const loc = tag.sourceCodeLocation!;
    this.textUntil(loc.startOffset);
    // The tag's own namespace: an SVG <title> switches to HTML for its content, so the state
    // after it says HTML; an <h1> leaves foreign content, so the state before it says foreign.
    const foreignBefore = this.foreign;
    const name = tag.tagName;
    if (this.skipped.length === 0) {
      if (name === 'body') this.openBody(loc.endOffset);
      else if (name === 'frameset' && !this.inBody) this.frameset = true;
      else if (!HEAD_TAGS.has(name)) this.openBody(loc.startOffset);
      // A second <body> or <html> only adds attributes to the first.
      if (this.afterHtml || (name !== 'body' && name !== 'html')) this.bodyContent(loc.endOffset);
      const cell = !foreignAfter && this.scope(name);
      if (this.inHeading) this.headingStart(name, tag.selfClosing && foreignAfter);
      if (name === 'title' && !foreignBefore && !this.titleSeen) this.titleSeen = this.titleOpen = true;
      if (name === 'h1' && !foreignAfter && this.heading === null && this.inBody) this.inHeading = true;
      if (this.inBody) {
        if (BLOCKS.has(name) && name !== 'body') this.out.lineBreak();
        else if (cell) this.out.space();
      }
    } else {
      this.bodyContent(loc.endOffset);
    }
    if (SKIPPED.has(name) && !(tag.selfClosing && foreignAfter)) this.skipped.push(name);
    if (
      MEDIA.has(name) &&
      !foreignAfter &&
      (name !== 'a' || tag.attrs.some((a) => a.name === 'download' || a.name === 'data-type'))
    ) {
      this.media.push([loc.startOffset, loc.endOffset]);
    }
    this.after(loc.endOffset, this.sax.state);
  }

  /** Tables' parts and scope bounds as the tree builder follows them when well-formed; true for a cell. */
  private scope(name: string): boolean {
    if (CLOSE_CELL.has(name)) {
      while (CELLS.has(this.scopes.at(-1)!) || this.scopes.at(-1) === 'caption') this.scopes.pop();
      // A cell or caption outside a table is no element at all.
      if (CELLS.has(name) || name === 'caption') {
        if (this.scopes.at(-1) !== 'table') return false;
        this.scopes.push(name);
        return name !== 'caption';
      }
      return false;
    }
    if (SCOPES.has(name)) this.scopes.push(name);
    return false;
  }

  private headingStart(name: string, closed: boolean): void {
    if (HEADINGS.has(name)) {
      // A heading right inside the <h1> closes it; deeper down it is part of its text.
      if (this.headingDepth === 0) {
        this.endHeading();
        return;
      }
      this.nestedHeadings++;
    }
    if (!VOID.has(name) && !closed) this.headingDepth++;
  }

  private onEndTag(tag: EndTag): void {
    const loc = tag.sourceCodeLocation!;
    this.textUntil(loc.startOffset);
    const name = tag.tagName;
    const open = this.skipped.lastIndexOf(name);
    if (this.skipped.length === 0) {
      if (!this.inBody && BODY_OPENING_END_TAGS.has(name)) this.openBody(loc.startOffset);
      if (name === 'body' && this.inBody && !this.bodyClosed && this.scopes.length === 0) {
        this.bodyEnd = loc.startOffset;
        this.bodyClosed = true;
      }
      if (this.inHeading) this.headingEnd(name);
      if (this.inBody && BLOCKS.has(name) && name !== 'body') this.out.lineBreak();
      this.unscope(name);
    }
    if (name === 'html') this.afterHtml = true;
    else if (name !== 'body') this.bodyContent(loc.endOffset);
    if (name === 'title') this.titleOpen = false;
    if (open !== -1) this.skipped.length = open;
    this.after(loc.endOffset, TokenizerMode.DATA);
  }

  private unscope(name: string): void {
    if (name === 'tr' || name === 'tbody' || name === 'thead' || name === 'tfoot') {
      while (CELLS.has(this.scopes.at(-1)!)) this.scopes.pop();
      return;
    }
    if (!SCOPES.has(name)) return;
    const open = CELLS.has(name)
      ? Math.max(this.scopes.lastIndexOf('td'), this.scopes.lastIndexOf('th'))
      : this.scopes.lastIndexOf(name);
    if (open !== -1 && this.scopes.lastIndexOf('table') <= open) this.scopes.length = open;
  }

  private headingEnd(name: string): void {
    if (HEADINGS.has(name)) {
      if (this.nestedHeadings === 0) {
        this.endHeading();
        return;
      }
      this.nestedHeadings--;
    }
    if (this.headingDepth > 0) this.headingDepth--;
  }

  /** A comment or doctype: no text; a comment before </html> is the body's content when in it. */
  private onOther(loc: Loc | null | undefined, comment: boolean): void {
    if (!loc) return;
    this.textUntil(loc.startOffset);
    if (comment && !this.afterHtml) this.bodyContent(loc.endOffset);
    this.after(loc.endOffset, TokenizerMode.DATA);
  }

  private after(end: number, mode: number): void {
    this.pos = end;
    this.mode = mode;
    this.foreign = this.sax.inForeignNode;
  }

  private endHeading(): void {
    this.inHeading = false;
    this.headingDepth = this.nestedHeadings = 0;
    this.heading = this.headingParts.join('');
    this.headingParts = [];
  }

  private textUntil(end: number): void {
    const start = this.pos;
    if (end <= start) return;
    this.pos = end;
    if (this.titleOpen) {
      this.name = this.decode(start, end);
      this.titleOpen = false;
    }
    if (this.skipped.length > 0) {
      this.bodyContent(end);
      return;
    }
    if (!this.inBody) {
      // Only text of the data state opens the body: a head element's raw text does not.
      if (this.mode !== TokenizerMode.DATA) return;
      let first = start;
      while (first < end && isSpace(this.html.charCodeAt(first))) first++;
      if (first === end) return;
      this.openBody(first);
      if (!this.inBody) return;
    }
    this.bodyContent(end);
    if (this.inHeading) {
      const text = this.decode(start, end);
      this.headingParts.push(text);
      this.out.append(text, 0, text.length);
      return;
    }
    // Most text needs no decoding: copied as it is up to the first character that may.
    const plainEnd = this.mode === TokenizerMode.DATA ? this.out.appendPlain(this.html, start, end) : start;
    if (plainEnd < end) {
      const text = this.decode(plainEnd, end);
      this.out.append(text, 0, text.length);
    }
  }

  /** The source text `[start, end)` as the tokenizer's current state reads it. */
  private decode(start: number, end: number): string {
    let raw = this.html.slice(start, end);
    switch (this.mode) {
      case TokenizerMode.DATA: {
        if (raw.includes('</>')) raw = raw.replace(DROPPED_IN_DATA, '');
        const text = this.foreign && raw.includes('<![CDATA[') ? cdata(raw) : raw.includes('&') ? decodeHTML(raw) : raw;
        // The tree builder drops NUL in the data state.
        return text.includes('\0') ? text.replaceAll('\0', '') : text;
      }
      case TokenizerMode.RCDATA:
        return (raw.includes('&') ? decodeHTML(raw) : raw).replaceAll('\0', '\ufffd');
      default:
        return raw.replaceAll('\0', '\ufffd');
    }
  }
}
