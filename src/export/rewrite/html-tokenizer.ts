/**
 * parse5's tokenizer driven for the media rewriter (html-rewriter.ts): synchronously, over a whole
 * document, with character tokens dropped and text in the data state skipped in one jump. Relies
 * on parse5 internals (parse5 is pinned to an exact version): test/export/rewrite/parse5-internals.test.ts
 * fails if an upgrade changes them.
 */
import { SAXParser, type StartTag } from 'parse5-sax-parser';

/** The field of parse5's Tokenizer read to tell foreign content (SVG, MathML) apart. */
interface TokenizerView {
  inForeignNode: boolean;
}

/** The parts of parse5's Tokenizer and Preprocessor the data-state fast path touches. */
interface DataStateView {
  _stateData?: (cp: number) => void;
  preprocessor: { html: string; pos: number; isEol: boolean };
}

/** What ends a run of plain text in the data state (see skipTextInDataState). */
const TEXT_STOP = /[<&\0\r\n\ud800-\udfff]/g;

/**
 * Text in the data state is most of a document's HTML and cannot start a tag, yet parse5 runs
 * each of its characters through a state function and builds character tokens that this rewriter
 * throws away: 70 % of the tokenizer's time on typical documents. In the data state, a character
 * other than `<`, `&`, NUL or a line break changes nothing but the text, so after one such
 * character the tokenizer may move straight to the next `<`, `&`, NUL, CR, LF or surrogate (the
 * characters whose handling has side effects: tags, references, errors, line and code point
 * bookkeeping). Offsets stay exact, which is all the splicing uses; text events are lost, which
 * nothing here listens to. A parse5 without `_stateData` keeps its own, slower, path; the
 * internals and reference tests fail if a parse5 upgrade changes what it means.
 */
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
export class SyncSaxParser extends SAXParser {
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

  /** Tokenizes a whole document, emitting its start tags synchronously. */
  feed(html: string): void {
    this.tokenizer.write(html, true);
  }
}
