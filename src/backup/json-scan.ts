/**
 * A strict JSON (RFC 8259) well-formedness scanner over bytes, fed in pieces, that builds nothing:
 * no tokens, no strings, no garbage, so the backup client can check a body at several hundred MB/s
 * beside a download (bench/RESULTS.md). It tells its owner only what the export checks need: each
 * value's start with its depth and the keys above it (top-level key, key at depth 2), and the text
 * of a number when asked for. UTF-8 inside strings is not validated (nor was it by the decoder it
 * replaces), and a key written with escapes is not recognised as a key of interest (the export never
 * writes one). Errors are thrown as `JsonScanError` with the byte offset.
 */

export class JsonScanError extends Error {}

/** What kind of value starts. */
export type ValueKind = 'object' | 'array' | 'string' | 'number' | 'true' | 'false' | 'null';

/** What the scanner tells its owner. */
export interface ScanHandlers {
  /**
   * A value starts at `depth` (0: the top level; the elements of a top-level object's array are at
   * 2); `scanner.topKey` and `scanner.innerKey` say where. Returning true for a number asks for its text.
   */
  value(kind: ValueKind, depth: number, scanner: JsonScanner): boolean | void;
  /** The text of a number `value` asked for, once it ended (null when longer than 40 bytes). */
  number?(text: string | null): void;
  /** NDJSON: a line's value ended with its newline. With this, the input is read as lines. */
  line?(): void;
}

// States between bytes.
const VALUE = 0; // a value is due
const VALUE_OR_CLOSE = 1; // after `[`
const KEY_OR_CLOSE = 2; // after `{`
const KEY = 3; // after `,` in an object
const COLON = 4;
const AFTER_VALUE = 5; // `,`, a close, or (at depth 0) the end
const STRING = 6;
const ESCAPE = 7;
const UNICODE = 8; // inside a \u escape's four hex digits
const NUMBER = 9;
const LITERAL = 10;
const DONE = 11; // the top-level value ended: whitespace only

// Number sub-states: what the last byte was.
const N_MINUS = 0;
const N_ZERO = 1;
const N_INT = 2;
const N_DOT = 3;
const N_FRAC = 4;
const N_E = 5;
const N_ESIGN = 6;
const N_EXP = 7;

const MAX_DEPTH = 1024;
const KEY_CAPTURE = 32;
const NUMBER_CAPTURE = 40;

const LITERALS: Record<number, { text: Uint8Array; kind: ValueKind }> = {
  0x74: { text: Buffer.from('true'), kind: 'true' },
  0x66: { text: Buffer.from('false'), kind: 'false' },
  0x6e: { text: Buffer.from('null'), kind: 'null' },
};

/** 1 for a byte that neither ends a string, starts an escape nor is a control character. */
const PLAIN_IN_STRING = new Uint8Array(256).fill(1);
for (let c = 0; c < 0x20; c++) PLAIN_IN_STRING[c] = 0;
PLAIN_IN_STRING[0x22] = 0;
PLAIN_IN_STRING[0x5c] = 0;

const isWhitespace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

/**
 * Scans one JSON text (or, with a `line` handler, one per line: NDJSON, where a newline ends each
 * value). Feed it with `write(chunk)`, then `end()`. Throws JsonScanError.
 */
export class JsonScanner {
  /** The key, at the top level, of the value being read (for depth >= 1 in an object), or null. */
  topKey: string | null = null;
  /** The key of the value at depth 2 being read (in an object at depth 1), or null. */
  innerKey: string | null = null;

  private state = VALUE;
  private depth = 0;
  // 1 for an object, 0 for an array, per depth.
  private readonly stack = new Uint8Array(MAX_DEPTH);
  private offset = 0;
  private numberState = N_MINUS;
  private literal: Uint8Array = LITERALS[0x74]!.text;
  private literalAt = 0;
  private unicodeLeft = 0;
  // The bytes of a key (depth 1 or 2) or of a number asked for; null when not capturing.
  private capture: number[] | null = null;
  private keyOverflow = false;
  private stringIsKey = false;
  private lineHasValue = false;

  private readonly lines: boolean;

  constructor(private readonly handlers: ScanHandlers) {
    this.lines = handlers.line !== undefined;
  }

  private fail(why: string, at: number): never {
    throw new JsonScanError(`not valid JSON at byte ${this.offset + at}: ${why}`);
  }

  private startValue(kind: ValueKind): void {
    const wantText = this.handlers.value(kind, this.depth, this) === true;
    this.lineHasValue = true;
    if (kind === 'number') this.capture = wantText ? [] : null;
  }

  // The value at this depth ended: what may follow depends on the container around it.
  private valueEnded(): void {
    this.state = this.depth === 0 ? DONE : AFTER_VALUE;
  }

  private open(isObject: boolean, at: number): void {
    if (this.depth === MAX_DEPTH) this.fail('nested too deeply', at);
    this.stack[this.depth++] = isObject ? 1 : 0;
    this.state = isObject ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
  }

  private close(isObject: boolean, at: number): void {
    if (this.depth === 0 || this.stack[this.depth - 1] !== (isObject ? 1 : 0))
      this.fail(`unexpected ${isObject ? '}' : ']'}`, at);
    this.depth--;
    if (this.depth === 1) this.innerKey = null;
    if (this.depth === 0) this.topKey = null;
    this.valueEnded();
  }

  private endNumber(at: number): void {
    if (
      this.numberState === N_MINUS ||
      this.numberState === N_DOT ||
      this.numberState === N_E ||
      this.numberState === N_ESIGN
    )
      this.fail('an unfinished number', at);
    if (this.capture !== null) {
      const text = this.capture.length <= NUMBER_CAPTURE ? String.fromCharCode(...this.capture) : null;
      this.capture = null;
      this.handlers.number?.(text);
    }
    this.valueEnded();
  }

  private startString(isKey: boolean): void {
    this.state = STRING;
    this.stringIsKey = isKey;
    // Keys are kept only where the export's checks look: at depth 1 and 2.
    if (isKey && (this.depth === 1 || this.depth === 2)) {
      this.capture = [];
      this.keyOverflow = false;
    } else {
      this.capture = null;
    }
  }

  private endString(): void {
    if (this.stringIsKey) {
      if (this.capture !== null) {
        const key = this.keyOverflow ? '\u0000' : String.fromCharCode(...this.capture);
        if (this.depth === 1) this.topKey = key;
        else this.innerKey = key;
        this.capture = null;
      }
      this.state = COLON;
    } else this.valueEnded();
  }

  /** Scans a piece. Throws JsonScanError at the first byte that cannot continue a JSON text. */
  write(chunk: Uint8Array): void {
    const n = chunk.length;
    let i = 0;
    scan: while (i < n) {
      let c = chunk[i]!;
      switch (this.state) {
        case STRING: {
          // The hot loop: most of an export's bytes are inside strings.
          if (this.capture === null) {
            // One table lookup a byte rather than three comparisons: most bytes of an export pass here.
            while (PLAIN_IN_STRING[c] === 1) {
              if (++i === n) break;
              c = chunk[i]!;
            }
            if (i === n) break scan;
          }
          if (c === 0x22) this.endString();
          else if (c === 0x5c) {
            this.state = ESCAPE;
            if (this.capture !== null) this.keyOverflow = true;
          } else if (c < 0x20) this.fail('a control character inside a string', i);
          else if (this.capture !== null) {
            if (this.capture.length < KEY_CAPTURE && c < 0x80) this.capture.push(c);
            else this.keyOverflow = true;
          }
          i++;
          continue;
        }
        case ESCAPE:
          if (c === 0x75) {
            this.state = UNICODE;
            this.unicodeLeft = 4;
          } else if (
            c === 0x22 ||
            c === 0x5c ||
            c === 0x2f ||
            c === 0x62 ||
            c === 0x66 ||
            c === 0x6e ||
            c === 0x72 ||
            c === 0x74
          )
            this.state = STRING;
          else this.fail('a bad escape', i);
          i++;
          continue;
        case UNICODE:
          if (!isHex(c)) this.fail('a bad \\u escape', i);
          if (--this.unicodeLeft === 0) this.state = STRING;
          i++;
          continue;
        case NUMBER: {
          const s = this.numberState;
          if (isDigit(c)) {
            if (s === N_ZERO) this.fail('a leading zero', i);
            this.numberState =
              s === N_MINUS
                ? c === 0x30
                  ? N_ZERO
                  : N_INT
                : s === N_DOT
                  ? N_FRAC
                  : s === N_E || s === N_ESIGN
                    ? N_EXP
                    : s;
          } else if (c === 0x2e && (s === N_ZERO || s === N_INT)) this.numberState = N_DOT;
          else if ((c === 0x65 || c === 0x45) && (s === N_ZERO || s === N_INT || s === N_FRAC)) this.numberState = N_E;
          else if ((c === 0x2b || c === 0x2d) && s === N_E) this.numberState = N_ESIGN;
          else {
            this.endNumber(i);
            continue; // the byte after the number is read in the new state
          }
          if (this.capture !== null && this.capture.length <= NUMBER_CAPTURE) this.capture.push(c);
          i++;
          continue;
        }
        case LITERAL:
          if (c !== this.literal[this.literalAt]) this.fail('a bad literal', i);
          if (++this.literalAt === this.literal.length) this.valueEnded();
          i++;
          continue;
        default:
      }
      // Between tokens.
      if (isWhitespace(c)) {
        if (c === 0x0a && this.lines) this.newline(i);
        i++;
        continue;
      }
      switch (this.state) {
        case VALUE:
        case VALUE_OR_CLOSE:
          if (c === 0x5d && this.state === VALUE_OR_CLOSE) this.close(false, i);
          else this.value(c, i);
          break;
        case KEY_OR_CLOSE:
        case KEY:
          if (c === 0x22) this.startString(true);
          else if (c === 0x7d && this.state === KEY_OR_CLOSE) this.close(true, i);
          else this.fail('a key is due', i);
          break;
        case COLON:
          if (c !== 0x3a) this.fail('":" is due', i);
          this.state = VALUE;
          break;
        case AFTER_VALUE:
          if (c === 0x2c) this.state = this.stack[this.depth - 1] === 1 ? KEY : VALUE;
          else if (c === 0x7d || c === 0x5d) this.close(c === 0x7d, i);
          else this.fail('"," or a close is due', i);
          break;
        case DONE:
          this.fail('more after the end of the value', i);
          break;
        default:
      }
      i++;
    }
    this.offset += n;
  }

  private value(c: number, at: number): void {
    if (c === 0x7b) {
      this.startValue('object');
      this.open(true, at);
    } else if (c === 0x5b) {
      this.startValue('array');
      this.open(false, at);
    } else if (c === 0x22) {
      this.startValue('string');
      this.startString(false);
    } else if (c === 0x2d || isDigit(c)) {
      this.startValue('number');
      this.state = NUMBER;
      this.numberState = c === 0x2d ? N_MINUS : c === 0x30 ? N_ZERO : N_INT;
      if (this.capture !== null) this.capture.push(c);
    } else if (LITERALS[c] !== undefined) {
      this.startValue(LITERALS[c]!.kind);
      this.state = LITERAL;
      this.literal = LITERALS[c]!.text;
      this.literalAt = 1;
    } else this.fail('a value is due', at);
  }

  // NDJSON: a newline ends a line's value; an empty line or one ending inside a value is an error.
  private newline(at: number): void {
    if (this.state !== DONE) this.fail(this.lineHasValue ? 'the line ends inside a value' : 'an empty line', at);
    this.handlers.line!();
    this.state = VALUE;
    this.lineHasValue = false;
  }

  /** The end of the input. Throws JsonScanError when it ends inside a value (or, for lines, inside a line). */
  end(): void {
    if (this.state === NUMBER && this.depth === 0) this.endNumber(0);
    if (this.lines) {
      if (this.lineHasValue) this.fail('the last line has no newline', 0);
      return;
    }
    if (this.state !== DONE) this.fail('the text ends inside a value', 0);
  }
}
