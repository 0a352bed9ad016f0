/**
 * The parse5 internals the rewriter's tokenizer (src/export/rewrite/rewriter/html-tokenizer.ts) relies on,
 * checked one by one, so that a parse5 upgrade that changes them fails here by name rather than as
 * a wrong byte somewhere in an export. parse5 and parse5-sax-parser are pinned to exact versions
 * in package.json; this test is what an upgrade must pass.
 */
import path from 'node:path';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { SAXParser, type StartTag } from 'parse5-sax-parser';
import { SyncSaxParser } from '../../../../src/export/rewrite/rewriter/html-tokenizer.js';
import { ROOT } from '../../../helpers/paths.js';

const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
};

/** The tokenizer's fields as html-tokenizer.ts reads them. */
interface TokenizerInternals {
  _stateData?: unknown;
  _stateTagOpen?: unknown;
  _stateEndTagOpen?: unknown;
  _createStartTagToken?: unknown;
  _createEndTagToken?: unknown;
  emitCurrentTagToken?: unknown;
  getCurrentLocation?: unknown;
  currentToken?: unknown;
  state?: unknown;
  inForeignNode?: unknown;
  preprocessor?: { html?: unknown; pos?: unknown; isEol?: unknown; line?: unknown; col?: unknown; offset?: unknown };
  write(html: string, last: boolean): void;
}

t.test('parse5 and parse5-sax-parser are pinned to the exact versions installed', async (t) => {
  for (const name of ['parse5', 'parse5-sax-parser']) {
    const wanted = pkg.dependencies[name];
    t.match(wanted, /^\d+\.\d+\.\d+$/, `${name} is an exact version in package.json`);
    const manifest = path.join(ROOT, `node_modules/${name}/package.json`);
    const installed = (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
    t.equal(installed, wanted, `${name} installed is the pinned one`);
  }
});

t.test(
  "the tokenizer's states, token methods, preprocessor and foreign-content flag exist with the shapes relied on",
  async (t) => {
    const plain = new SAXParser({ sourceCodeLocationInfo: true });
    const tz = (plain as unknown as { tokenizer: TokenizerInternals }).tokenizer;
    t.type(tz._stateData, 'function', 'Tokenizer._stateData: the data state, replaced by the fast path');
    t.type(tz.inForeignNode, 'boolean', 'Tokenizer.inForeignNode');
    t.type(tz.preprocessor?.pos, 'number', 'Preprocessor.pos');
    t.type(tz.preprocessor?.isEol, 'boolean', 'Preprocessor.isEol');
    tz.write('<p>x', false);
    t.equal(tz.preprocessor?.html, '<p>x', 'Preprocessor.html holds the input written');

    t.equal(tz.state, 0, 'Tokenizer.state: 0 is the data state');
    for (const method of [
      '_stateTagOpen',
      '_stateEndTagOpen',
      '_createStartTagToken',
      '_createEndTagToken',
      'emitCurrentTagToken',
      'getCurrentLocation',
    ] as const) {
      t.type(tz[method], 'function', `Tokenizer.${method}: what the plain-tag fast path calls or replaces`);
    }
    t.ok('currentToken' in tz, 'Tokenizer.currentToken');
    for (const field of ['line', 'col', 'offset'] as const)
      t.type(tz.preprocessor?.[field], 'number', `Preprocessor.${field}`);

    const ours = new SyncSaxParser(() => {});
    const patched = (ours as unknown as { tokenizer: TokenizerInternals }).tokenizer;
    t.not(patched._stateData, tz._stateData, 'SyncSaxParser installs its data-state fast path');
    t.not(patched._stateTagOpen, tz._stateTagOpen, 'SyncSaxParser installs its start-tag fast path');
    t.not(patched._stateEndTagOpen, tz._stateEndTagOpen, 'SyncSaxParser installs its end-tag fast path');
  },
);

t.test(
  'what the rewriter gets from the tokenizer: start tags with attribute offsets, foreign content flagged, synchronously',
  async (t) => {
    const html = 'text <b>bold</b><img src="a.png" alt=x><svg><image href=s.png></image></svg><img src=b.png>&amp; end';
    const seen: { name: string; foreign: boolean; src?: [number, number] }[] = [];
    const sax = new SyncSaxParser((tag: StartTag, foreign) => {
      const loc = (
        tag.sourceCodeLocation as { attrs?: Record<string, { startOffset: number; endOffset: number }> } | null
      )?.attrs;
      const src = loc?.src;
      seen.push({
        name: tag.tagName,
        foreign,
        ...(src ? { src: [src.startOffset, src.endOffset] as [number, number] } : {}),
      });
    });
    sax.tokenize(html, true);
    t.same(
      seen.map((s) => [s.name, s.foreign]),
      [
        ['b', false],
        ['img', false],
        ['svg', true],
        ['image', true],
        ['img', false],
      ],
      'every start tag, in order, before feed returns; <svg> and what it holds flagged foreign',
    );
    const first = seen.find((s) => s.name === 'img')!;
    t.equal(html.slice(first.src![0], first.src![1]), 'src="a.png"', 'attribute offsets span name to closing quote');
    const last = seen.filter((s) => s.name === 'img')[1]!;
    t.equal(html.slice(last.src![0], last.src![1]), 'src=b.png', 'offsets stay exact after text the fast path skipped');
  },
);

t.test('a parser for the next document: SAXParser keeps its tokenizer in a parser feedback simulator', async (t) => {
  const plain = new SAXParser({ sourceCodeLocationInfo: true });
  const fields = plain as unknown as {
    parserFeedbackSimulator?: { tokenizer?: unknown; constructor: new (options: unknown, handler: unknown) => unknown };
    tokenizer?: unknown;
    options?: unknown;
    pendingText?: unknown;
    stopped?: unknown;
    lastChunkWritten?: unknown;
  };
  t.equal(fields.tokenizer, fields.parserFeedbackSimulator?.tokenizer, 'SAXParser.tokenizer is its simulator’s');
  t.type(fields.options, 'object', 'SAXParser.options');
  t.equal(fields.pendingText, null, 'SAXParser.pendingText');
  t.equal(fields.stopped, false, 'SAXParser.stopped');
  t.equal(fields.lastChunkWritten, false, 'SAXParser.lastChunkWritten');
  const made = new fields.parserFeedbackSimulator!.constructor(fields.options, plain) as { tokenizer?: unknown };
  t.type(made.tokenizer, 'object', 'new ParserFeedbackSimulator(options, handler) makes its own tokenizer');
  t.not(made.tokenizer, fields.tokenizer, 'a tokenizer of its own');

  const names: string[] = [];
  const sax = new SyncSaxParser((tag) => names.push(`a:${tag.tagName}`));
  sax.tokenize('<svg><image href="x">', true);
  sax.release();
  t.equal(
    (sax as unknown as { tokenizer: TokenizerInternals }).tokenizer.preprocessor?.html,
    '',
    'a released parser keeps none of its text',
  );
  sax.reset((tag, foreign) => names.push(`b:${tag.tagName}:${foreign}`));
  sax.tokenize('<img src="y">', true);
  t.same(names, ['a:svg', 'a:image', 'b:img:false'], 'after reset, tags go to the new handler, outside the last <svg>');
});
