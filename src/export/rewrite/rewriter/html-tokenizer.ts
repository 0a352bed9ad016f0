/** parse5's tokenizer driven synchronously, through internals test/export/rewrite/parse5-internals.test.ts pins. */
import { SAXParser, type StartTag } from 'parse5-sax-parser';

interface TokenizerView {
  inForeignNode: boolean;
}

interface DataStateView {
  _stateData?: (cp: number) => void;
  preprocessor: { html: string; pos: number; isEol: boolean };
}

const TEXT_STOP = /[<&\0\r\n\ud800-\udfff]/g;

/** Jumps from a plain character to the next `<`, `&`, NUL, line break or surrogate; offsets stay exact. */
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

/** Drives the SAX parser synchronously: its stream API defers `end()` to a later tick. */
export class SyncSaxParser extends SAXParser {
  constructor(onStartTag: (tag: StartTag, foreign: boolean) => void) {
    super({ sourceCodeLocationInfo: true });
    this.on('startTag', (tag: StartTag) => onStartTag(tag, this.view().inForeignNode));
    skipTextInDataState(this.tokenizer as unknown as DataStateView);
  }

  private view(): TokenizerView {
    return this.tokenizer as unknown as TokenizerView;
  }

  // Character tokens are most of SAXParser's cost, and text never matters here.
  override onCharacter(): void {}
  override onWhitespaceCharacter(): void {}
  override onNullCharacter(): void {}

  tokenize(chunk: string, last: boolean): void {
    this.tokenizer.write(chunk, last);
  }
}
