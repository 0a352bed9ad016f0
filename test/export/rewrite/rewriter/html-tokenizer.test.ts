/**
 * The tokenizer's fast paths (src/export/rewrite/rewriter/html-tokenizer.ts) against parse5 left to
 * itself: every tag token (name, attributes, self-closing flag, locations of the tag and of each
 * attribute), the state it leaves the tokenizer in and the foreign-content flag, for generated HTML
 * fed whole and in pieces of random sizes.
 */
import fc from 'fast-check';
import t from 'tap';
import { SAXParser, type EndTag, type StartTag } from 'parse5-sax-parser';
import { SyncSaxParser } from '../../../../src/export/rewrite/rewriter/html-tokenizer.js';

interface TokenizerView {
  state: number;
  inForeignNode: boolean;
  write(html: string, last: boolean): void;
}

type Seen = { kind: 'start' | 'end'; tag: StartTag | EndTag; state: number; foreign: boolean };

const view = (p: SAXParser): TokenizerView => (p as unknown as { tokenizer: TokenizerView }).tokenizer;

/** The tag tokens as parse5's own states make them. */
function reference(pieces: string[]): Seen[] {
  const seen: Seen[] = [];
  const sax = new SAXParser({ sourceCodeLocationInfo: true });
  const tz = view(sax);
  sax.on('startTag', (tag: StartTag) => seen.push({ kind: 'start', tag, state: tz.state, foreign: tz.inForeignNode }));
  sax.on('endTag', (tag: EndTag) => seen.push({ kind: 'end', tag, state: tz.state, foreign: tz.inForeignNode }));
  pieces.forEach((p, i) => tz.write(p, i === pieces.length - 1));
  return seen;
}

/** The same through SyncSaxParser, fast paths and all. */
function ours(pieces: string[]): Seen[] {
  const seen: Seen[] = [];
  const sax = new SyncSaxParser((tag, foreign) => seen.push({ kind: 'start', tag, state: tz.state, foreign }));
  const tz = view(sax);
  sax.on('endTag', (tag: EndTag) => seen.push({ kind: 'end', tag, state: tz.state, foreign: tz.inForeignNode }));
  pieces.forEach((p, i) => sax.tokenize(p, i === pieces.length - 1));
  return seen;
}

/** `html` cut at the given offsets (any order, duplicates ignored). */
function cut(html: string, at: number[]): string[] {
  const points = [...new Set(at.map((a) => a % (html.length + 1)))].sort((a, b) => a - b);
  const pieces: string[] = [];
  let from = 0;
  for (const p of points) {
    pieces.push(html.slice(from, p));
    from = p;
  }
  pieces.push(html.slice(from));
  return pieces;
}

const name = fc.constantFrom(
  'a',
  'img',
  'p',
  'div',
  'h1',
  'td',
  'my-el',
  'svg',
  'math',
  'title',
  'textarea',
  'script',
  'style',
  'br',
  'A',
  'Img',
  'x1',
);
const attrName = fc.constantFrom(
  'href',
  'src',
  'class',
  'data-x',
  'xlink:href',
  'a_b',
  'a.b',
  'download',
  'HREF',
  'src',
  'é',
  '"',
  '<',
);
const valueChar = fc.constantFrom(
  'a',
  'b',
  '/',
  ' ',
  '\t',
  '=',
  '>',
  '<',
  '"',
  "'",
  '&',
  '&amp;',
  '&#65;',
  '\n',
  '\r\n',
  '\r',
  '\0',
  '\u{1f600}',
  '\ud800',
  'é',
  '\f',
  '\x01',
);
const value = fc.array(valueChar, { maxLength: 20 }).map((cs) => cs.join(''));
const space = fc.constantFrom(' ', '  ', '\t', '\n', '\f', '');
const attr = fc
  .tuple(space, attrName, fc.constantFrom('', '="', "='", '=', ' = "'), value)
  .map(([s, n, eq, v]) =>
    eq === '' ? `${s}${n}` : `${s}${n}${eq}${v}${eq.endsWith('"') ? '"' : eq.endsWith("'") ? "'" : ' '}`,
  );
const startTag = fc
  .tuple(name, fc.array(attr, { maxLength: 5 }), space, fc.constantFrom('>', '/>', ' />', '/ >', ''))
  .map(([n, as, s, end]) => `<${n}${as.join('')}${s}${end}`);
const endTag = fc.tuple(name, space, fc.constantFrom('>', '/>', ' x>', '')).map(([n, s, end]) => `</${n}${s}${end}`);
const other = fc.constantFrom(
  'text',
  ' ',
  '\n',
  '\r\n',
  '&amp;',
  '<!-- c -->',
  '<!doctype html>',
  '<',
  '</',
  '< p>',
  '<![CDATA[x]]>',
  '</>',
  'é',
  '\u{1f600}',
  '\0',
);
const html = fc.array(fc.oneof(startTag, startTag, endTag, other), { maxLength: 30 }).map((ps) => ps.join(''));

t.test("every tag token, its locations and the state after it are parse5's own, whole and in pieces", async (t) => {
  fc.assert(
    fc.property(html, fc.array(fc.nat(), { maxLength: 6 }), (doc, at) => {
      t.same(ours([doc]), reference([doc]), JSON.stringify(doc));
      const pieces = cut(doc, at);
      t.same(ours(pieces), reference(pieces), JSON.stringify(pieces));
    }),
    { numRuns: 400 },
  );
});

t.test('cases at the edges of a plain tag', async (t) => {
  const cases = [
    '<a href="x" class="y">',
    "<a href='x'>",
    '<img src="a.png"/>',
    '<img src="a.png" / >',
    '<a href="x"class="y">',
    '<a href="x" href="y">',
    '<a b c=""  d="e\tf">',
    '<a href="x&amp;y">',
    '<a href="x\ny">',
    '<a href="x\r\ny" title="z">',
    '<a href=x>',
    '<a href = "x">',
    '<A HREF="X">',
    '<p >x</p >',
    '</p/>',
    '</p x="y">',
    '<title>a <b> c</title><b>',
    '<svg><path d="m0 0"/><foreignObject><p class="x"></p></foreignObject></svg><p>',
    `<a ${Array.from({ length: 70 }, (_, i) => `a${i}="${i}"`).join(' ')} a3="dup">`,
    `<p title="${'long value '.repeat(5)}">`,
    '<a\u00a0href="x">',
  ];
  for (const c of cases) {
    t.same(ours([c]), reference([c]), JSON.stringify(c));
    for (let i = 1; i < c.length; i++)
      t.same(
        ours([c.slice(0, i), c.slice(i)]),
        reference([c.slice(0, i), c.slice(i)]),
        `${JSON.stringify(c)} cut at ${i}`,
      );
  }
});

t.test('a plain tag skips the per-character states; any other goes through them', async (t) => {
  const perCharacter = (doc: string): number => {
    let calls = 0;
    const sax = new SyncSaxParser(() => {});
    const tz = (sax as unknown as { tokenizer: Record<string, unknown> }).tokenizer;
    for (const state of ['_stateTagName', '_stateAttributeName', '_stateAttributeValueDoubleQuoted']) {
      const original = tz[state] as (cp: number) => void;
      tz[state] = function (this: unknown, cp: number) {
        calls++;
        original.call(this, cp);
      };
    }
    sax.tokenize(doc, true);
    return calls;
  };
  t.equal(
    perCharacter('<a href="x.png" class="y z">text</a><img src=\'a\' alt/>'),
    0,
    'plain start and end tags in one step each',
  );
  t.ok(perCharacter('<a HREF="x.png">') > 0, 'an upper-case attribute name is left to parse5');
  t.ok(perCharacter('<a href="x&amp;y">') > 0, 'a reference in a value is left to parse5');
});
