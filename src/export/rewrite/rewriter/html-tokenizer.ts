/** parse5's tokenizer driven synchronously, through internals test/export/rewrite/rewriter/parse5-internals.test.ts pins. */
import { SAXParser, type StartTag } from 'parse5-sax-parser';

interface Preprocessor {
  html: string;
  pos: number;
  isEol: boolean;
  readonly line: number;
  readonly col: number;
  readonly offset: number;
}

interface Location {
  startOffset: number;
  endLine: number;
  endCol: number;
  endOffset: number;
  attrs?: Record<string, Location>;
}

interface TagToken {
  tagName: string;
  selfClosing: boolean;
  attrs: { name: string; value: string }[];
  location: Location | null;
}

interface StateView {
  _stateData?: (cp: number) => void;
  _stateTagOpen?: (cp: number) => void;
  _stateEndTagOpen?: (cp: number) => void;
  _createStartTagToken(): void;
  _createEndTagToken(): void;
  emitCurrentTagToken(): void;
  getCurrentLocation(offset: number): Location | null;
  currentToken: TagToken | null;
  state: number;
  inForeignNode: boolean;
  preprocessor: Preprocessor;
}

/** parse5's `State.DATA`. */
const DATA = 0;

const TEXT_STOP = /[<&\0\r\n\ud800-\udfff]/g;

/** Jumps from a plain character to the next `<`, `&`, NUL, line break or surrogate; offsets stay exact. */
function skipTextInDataState(tz: StateView): void {
  const original = tz._stateData;
  if (typeof original !== 'function') return;
  const pre = tz.preprocessor;
  tz._stateData = function (this: StateView, cp: number): void {
    if (cp === 0x3c || cp === 0x26 || cp <= 0 || pre.isEol) {
      original.call(this, cp);
      return;
    }
    const html = pre.html;
    TEXT_STOP.lastIndex = pre.pos + 1;
    const j = TEXT_STOP.test(html) ? TEXT_STOP.lastIndex - 1 : html.length;
    // The loop's next advance() reads html[j]; at the end of the input it hibernates there.
    pre.pos = j - 1;
  };
}

// Tags whose every character the tokenizer would take as it is: lower-case ASCII names, quoted values
// without references, NUL, line breaks or surrogates, no duplicate attribute. Anything else, or a
// tag the input does not yet close, goes through parse5's states one character at a time.

/** A string of its own, as parse5's `_flushRun` makes it: a longer slice would keep the whole input alive. */
const own = (s: string): string => (s.length < 13 ? s : ` ${s}`.slice(1));

const isLower = (c: number): boolean => c >= 0x61 && c <= 0x7a;
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const isBlank = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0c;
const isTagNameChar = (c: number): boolean => isLower(c) || isDigit(c) || c === 0x2d;
const isAttrNameChar = (c: number): boolean => isTagNameChar(c) || c === 0x5f || c === 0x3a || c === 0x2e;
/** What a quoted value may hold besides its quote: no reference, NUL, line break or surrogate. */
const isPlainValueChar = (c: number): boolean =>
  c !== 0x26 && c !== 0 && c !== 0x0d && c !== 0x0a && (c < 0xd800 || c > 0xdfff);

function sameText(s: string, a: number, aEnd: number, b: number, bEnd: number): boolean {
  if (aEnd - a !== bEnd - b) return false;
  while (a < aEnd) if (s.charCodeAt(a++) !== s.charCodeAt(b++)) return false;
  return true;
}

/**
 * A plain tag's parts as offsets into the input: `end` is its `>`, `spans` holds per attribute its name's
 * start and end and its value's start and end (-1 without a value).
 */
class PlainTag {
  nameEnd = 0;
  end = 0;
  selfClosing = false;
  /** Four numbers per attribute, `count` of them in use. */
  readonly spans: number[] = [];
  count = 0;

  /** Whether a plain start tag (or an end tag, `end`) starts at `lt` and closes within `html`. */
  read(html: string, lt: number, endTag: boolean): boolean {
    const spans = this.spans;
    this.count = 0;
    let i = lt + (endTag ? 2 : 1);
    while (i < html.length && isTagNameChar(html.charCodeAt(i))) i++;
    this.nameEnd = i;
    for (;;) {
      if (i >= html.length) return false;
      let c = html.charCodeAt(i);
      const blank = isBlank(c);
      while (isBlank(c) && ++i < html.length) c = html.charCodeAt(i);
      if (c === 0x3e || (c === 0x2f && html.charCodeAt(i + 1) === 0x3e && !endTag)) {
        this.selfClosing = c === 0x2f;
        this.end = c === 0x2f ? i + 1 : i;
        return true;
      }
      if (!blank || endTag || !isLower(c)) return false;
      const nameStart = i;
      while (++i < html.length && isAttrNameChar(html.charCodeAt(i)));
      let valueStart = -1;
      let valueEnd = -1;
      const q = html.charCodeAt(i);
      if (q === 0x3d) {
        const quote = html.charCodeAt(i + 1);
        if (quote !== 0x22 && quote !== 0x27) return false;
        valueStart = i + 2;
        i = valueStart;
        while (i < html.length && (c = html.charCodeAt(i)) !== quote) {
          if (!isPlainValueChar(c)) return false;
          i++;
        }
        if (i >= html.length) return false;
        valueEnd = i++;
      }
      const nameEnd = valueStart === -1 ? i : valueStart - 2;
      // parse5 keeps the first of two equal names and reports the second: left to its states.
      const n = this.count;
      for (let k = 0; k < n; k += 4) if (sameText(html, spans[k]!, spans[k + 1]!, nameStart, nameEnd)) return false;
      spans[n] = nameStart;
      spans[n + 1] = nameEnd;
      spans[n + 2] = valueStart;
      spans[n + 3] = valueEnd;
      this.count = n + 4;
    }
  }
}

/**
 * Takes a tag of plain characters in one step, as parse5's states would have taken it character by
 * character: the same token, attributes and locations (test/export/rewrite/rewriter/html-tokenizer.test.ts).
 */
function takePlainTags(tz: StateView): void {
  const startOpen = tz._stateTagOpen;
  const endOpen = tz._stateEndTagOpen;
  if (typeof startOpen !== 'function' || typeof endOpen !== 'function') return;
  const pre = tz.preprocessor;
  const tag = new PlainTag();

  /** The tag-open state (`</` for an end tag: its first letter is `cp`) with the fast path in front. */
  const open = (original: (cp: number) => void, endTag: boolean) =>
    function (this: StateView, cp: number): void {
      const html = pre.html;
      const nameStart = pre.pos;
      if (!isLower(cp) || !tag.read(html, nameStart - (endTag ? 2 : 1), endTag)) {
        original.call(this, cp);
        return;
      }
      if (endTag) this._createEndTagToken();
      else this._createStartTagToken();
      const token = this.currentToken!;
      token.tagName = own(html.slice(nameStart, tag.nameEnd));
      const { spans, count } = tag;
      if (count > 0) {
        const locations: Record<string, Location> = Object.create(null);
        for (let k = 0; k < count; k += 4) {
          const name = own(html.slice(spans[k]!, spans[k + 1]!));
          const valueStart = spans[k + 2]!;
          const valueEnd = spans[k + 3]!;
          pre.pos = spans[k]!;
          const loc = this.getCurrentLocation(0)!;
          pre.pos = valueStart === -1 ? spans[k + 1]! : valueEnd + 1;
          loc.endLine = pre.line;
          loc.endCol = pre.col;
          loc.endOffset = pre.offset;
          locations[name] = loc;
          token.attrs.push({ name, value: valueStart === -1 ? '' : own(html.slice(valueStart, valueEnd)) });
        }
        token.location!.attrs = locations;
      }
      token.selfClosing = tag.selfClosing;
      pre.pos = tag.end;
      this.state = DATA;
      this.emitCurrentTagToken();
    };

  tz._stateTagOpen = open(startOpen, false);
  tz._stateEndTagOpen = open(endOpen, true);
}

type StartTagHandler = (tag: StartTag, foreign: boolean) => void;

/** SAXParser's fields that `reset` sets, private in its types. */
interface ParserState {
  parserFeedbackSimulator: { tokenizer: unknown };
  tokenizer: unknown;
  pendingText: unknown;
  lastChunkWritten: boolean;
  stopped: boolean;
}

const ignoreStartTag: StartTagHandler = () => {};

/**
 * Drives the SAX parser synchronously: its stream API defers `end()` to a later tick. One parser
 * takes document after document (`reset`): a SAXParser is a Transform stream piped into another,
 * and making those for each of a million small documents was most of what a cold export's rewrite
 * worker collected (bench/optimisations.md).
 */
export class SyncSaxParser extends SAXParser {
  #onStartTag: StartTagHandler;

  constructor(onStartTag: StartTagHandler) {
    super({ sourceCodeLocationInfo: true });
    this.#onStartTag = onStartTag;
    this.on('startTag', (tag: StartTag) =>
      this.#onStartTag(tag, (this.tokenizer as unknown as StateView).inForeignNode),
    );
    this.#patch();
  }

  #patch(): void {
    const tz = this.tokenizer as unknown as StateView;
    skipTextInDataState(tz);
    takePlainTags(tz);
  }

  /**
   * Starts a new document, its start tags going to `onStartTag`: a new tokenizer and the parser
   * feedback simulator that switches its modes, as SAXParser's constructor makes them.
   */
  reset(onStartTag: StartTagHandler): void {
    const state = this as unknown as ParserState;
    const Simulator = state.parserFeedbackSimulator.constructor as new (
      options: unknown,
      handler: unknown,
    ) => ParserState['parserFeedbackSimulator'];
    state.parserFeedbackSimulator = new Simulator(this.options, this);
    state.tokenizer = state.parserFeedbackSimulator.tokenizer;
    state.pendingText = null;
    state.lastChunkWritten = false;
    state.stopped = false;
    this.#onStartTag = onStartTag;
    this.#patch();
  }

  /** Lets go of the last document: its text and its handler, so a parser kept for reuse holds neither. */
  release(): void {
    (this.tokenizer as unknown as StateView).preprocessor.html = '';
    this.#onStartTag = ignoreStartTag;
  }

  // Character tokens are most of SAXParser's cost, and text never matters here.
  override onCharacter(): void {}
  override onWhitespaceCharacter(): void {}
  override onNullCharacter(): void {}

  tokenize(chunk: string, last: boolean): void {
    this.tokenizer.write(chunk, last);
  }
}
