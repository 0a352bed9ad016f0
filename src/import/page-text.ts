/** The plain text of a page as `import-html`'s reader (html-page.ts) builds it, and its small helpers. */
import { decodeHTML } from 'entities';

/** ASCII whitespace as HTML defines it; a no-break space is content, not layout. */
const SPACES = /[\t\n\f\r ]+/g;

export function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0c || c === 0x0d;
}

/**
 * The body's plain text in one buffer (pieces would cost the heap more than the page): whitespace runs
 * become a space, a block's edge a line break; spaces beside a break and at the ends go.
 */
export class TextBuilder {
  private buf: Uint16Array;
  private length = 0;
  private widest = 0;
  private pendingSpace = false;
  private pendingBreak = false;

  constructor(capacity: number) {
    this.buf = new Uint16Array(Math.max(16, capacity));
  }

  lineBreak(): void {
    this.pendingBreak = true;
  }

  space(): void {
    this.pendingSpace = true;
  }

  append(s: string, start: number, end: number): void {
    for (let i = start; i < end; i++) this.put(s.charCodeAt(i));
  }

  /** Stops at the first `&`, `<` or NUL, which need decoding; returns where. */
  appendPlain(s: string, start: number, end: number): number {
    for (let i = start; i < end; i++) {
      const c = s.charCodeAt(i);
      if (c === 0x26 || c === 0x3c || c === 0) return i;
      this.put(c);
    }
    return end;
  }

  private put(c: number): void {
    if (isSpace(c)) {
      this.pendingSpace = true;
      return;
    }
    if (this.length + 2 > this.buf.length) {
      const bigger = new Uint16Array(this.buf.length * 2);
      bigger.set(this.buf);
      this.buf = bigger;
    }
    if (this.length > 0 && (this.pendingBreak || this.pendingSpace))
      this.buf[this.length++] = this.pendingBreak ? 0x0a : 0x20;
    this.pendingBreak = this.pendingSpace = false;
    this.buf[this.length++] = c;
    if (c > this.widest) this.widest = c;
  }

  /** Trimmed as String.prototype.trim does. Lets the buffer go: its tokenizer may live until the next tick. */
  toString(): string {
    const units = this.buf.subarray(0, this.length);
    // A one-byte string when every character fits: half the memory of UTF-16.
    let text: string;
    if (this.widest < 0x100) {
      const bytes = Buffer.allocUnsafe(this.length);
      bytes.set(units);
      text = bytes.toString('latin1');
    } else {
      text = Buffer.from(units.buffer, 0, this.length * 2).toString('utf16le');
    }
    this.buf = new Uint16Array(0);
    this.length = 0;
    return text.trim();
  }
}

export interface Loc {
  startOffset: number;
  endOffset: number;
}

/** Foreign-content text with CDATA sections: their content is literal, the rest decoded. */
export function cdata(raw: string): string {
  let out = '';
  let pos = 0;
  for (const m of raw.matchAll(/<!\[CDATA\[([\s\S]*?)(?:\]\]>|$)/g)) {
    out += decodeHTML(raw.slice(pos, m.index)) + m[1];
    pos = m.index + m[0].length;
  }
  return out + decodeHTML(raw.slice(pos));
}

export function collapse(s: string): string {
  return s.replace(SPACES, ' ').trim();
}
