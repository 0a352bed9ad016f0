import t, { type Test } from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { parseFragment } from 'parse5';
import type { DefaultTreeAdapterTypes as T } from 'parse5';
import {
  HtmlMediaRewriter,
  mayNeedRewrite,
  rewriteHtml,
  urlTransformRules,
  type Edit,
  type UrlRewriteRules,
} from '../../../../src/export/rewrite/rewriter/html-rewriter.js';
import { rewriteMediaUrl, rewriteSrcset } from '../../../../src/export/rewrite/rewriter/media-url.js';
import { mapSrcsetUrls } from '../../../../src/export/rewrite/rewriter/srcset.js';
import { rewriteJsonText } from '../../../helpers/plans.js';
import { sourceUrl } from '../../../helpers/paths.js';

interface Case {
  rule: string;
  name: string;
  input: string;
  expected: string;
}

const P = '/media/';
const cases = JSON.parse(readFileSync(sourceUrl(import.meta.url, '../fixtures/rewriter-cases.json'), 'utf8')) as Case[];

/** The tokenizer's result with no pre-check in front of it. */
function tokenized(html: string, rules: string | UrlRewriteRules = P): string {
  return new HtmlMediaRewriter(rules).rewrite(html);
}

/**
 * The same, the document fed in pieces of random sizes (as parse5's own tests feed theirs):
 * `seed` picks the cuts, so a failure names the split that broke it.
 */
function tokenizedInPieces(html: string, seed: number, rules: string | UrlRewriteRules = P): string {
  const edits: Edit[] = [];
  const rw = new HtmlMediaRewriter(rules, (e) => edits.push(e));
  let state = seed;
  for (let at = 0; ;) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    const end = Math.min(html.length, at + 1 + (state % 7));
    rw.write(html.slice(at, end), end === html.length);
    if (end === html.length) break;
    at = end;
  }
  let out = '';
  let pos = 0;
  for (const e of edits) {
    out += html.slice(pos, e.start) + e.text;
    pos = e.end;
  }
  return out + html.slice(pos);
}

/** decisions.md D3.2 through the function production calls: a relative URL is one that gets the prefix. */
const isRelativeUrl = (u: string): boolean => rewriteMediaUrl(u, '/never-a-prefix-of-these/') !== u;

t.test('fixture file covers every rule of D3 that applies to HTML', async (t) => {
  const rules = new Set(cases.map((c) => c.rule));
  for (const r of ['D3.1', 'D3.2', 'D3.3', 'D3.4', 'D3.5', 'D3.7']) t.ok(rules.has(r), r);
  t.equal(new Set(cases.map((c) => c.name)).size, cases.length, 'case names are unique');
});

/**
 * Every path production takes gives `expected`: the string API (pre-check, then tokenizer), the
 * tokenizer alone, and for the export's prefix rules the splice into contentHtml's JSON text.
 */
function checkPaths(t: Test, input: string, expected: string, rules: string | UrlRewriteRules = P): void {
  t.equal(rewriteHtml(input, rules), expected, 'rewriteHtml');
  t.equal(tokenized(input, rules), expected, 'the tokenizer without the pre-check');
  for (const seed of [1, 2, 3])
    t.equal(tokenizedInPieces(input, seed, rules), expected, `fed in pieces (split ${seed})`);
  if (typeof rules === 'string') {
    const json = rewriteJsonText(Buffer.from(JSON.stringify(input)), rules);
    t.equal(JSON.parse(json.toString('utf8')), expected, 'spliced into the JSON text');
  }
}

for (const c of cases) {
  t.test(`${c.rule} ${c.name}`, async (t) => {
    checkPaths(t, c.input, c.expected);
    t.equal(rewriteHtml(c.expected, P), c.expected, 'idempotent');
    if (c.expected !== c.input) t.ok(mayNeedRewrite(c.input), 'mayNeedRewrite has no false negative');
  });
}

t.test('one document per rewriter', async (t) => {
  const rw = new HtmlMediaRewriter(P);
  t.equal(rw.rewrite('<p><img src="a.png"></p>'), '<p><img src="/media/a.png"></p>');
  t.throws(() => rw.rewrite('<img src=b.png>'), /one document per instance/);
  t.throws(() => rw.editsOf('<img src=b.png>'), /one document per instance/);
});

t.test('a document written after its end throws: its parser has gone to the next one', async (t) => {
  const rw = new HtmlMediaRewriter(P, () => {});
  rw.write('<img src="a.png">', true);
  t.throws(() => rw.write('<img src="b.png">', true), /the document has ended/);
});

// Rewriters reuse parsers (html-tokenizer.ts SyncSaxParser.reset): a document that ends inside
// foreign content, raw text, a comment or a tag must leave the next document as a fresh parser finds it.
t.test('the next document is rewritten as by a parser of its own, whatever the last one left open', async (t) => {
  const next = '<p><img src="a.png"><svg><image href="b.png"/></svg><img src="c.png"></p>';
  const fresh = new HtmlMediaRewriter(P).rewrite(next);
  t.equal(fresh, '<p><img src="/media/a.png"><svg><image href="b.png"/></svg><img src="/media/c.png"></p>');
  const unclosed = [
    '<svg><g>',
    '<math><mi>',
    '<script>',
    '<style>',
    '<textarea>',
    '<title>',
    '<noscript>',
    '<plaintext>',
    '<!-- ',
    '<img src="x.png" alt="',
    '<![CDATA[',
    '<svg><foreignObject><div>',
  ];
  for (const left of unclosed) {
    new HtmlMediaRewriter(P).editsOf(left + '<img src="x.png">');
    t.equal(new HtmlMediaRewriter(P).rewrite(next), fresh, `after ${JSON.stringify(left)}`);
  }
});

t.test('mayNeedRewrite', async (t) => {
  for (const s of [
    '<img',
    '<IMG src',
    '<a href download',
    '<A\nDOWNLOAD',
    '<a data-type="&#97;ttachment" href=x>',
    '<image/',
    '<source>',
    '<Video',
    '<audio\t',
    '<track\f',
    '<embed\r',
    '<object ',
    'x<a>download',
  ]) {
    t.ok(mayNeedRewrite(s), s);
  }
  for (const s of [
    '',
    'img src=a.png',
    '&lt;img src=a.png>',
    '<p>',
    '<abbr>',
    '<imgx>',
    '<area href>',
    '<i>',
    '< img src=a>',
    '<my-img src=a>',
    '<a href="doc">',
    '<A HREF=x.pdf>',
    'download <b>x</b>',
  ]) {
    t.notOk(mayNeedRewrite(s), s);
  }
});

// Building blocks for random HTML: tags that can never be rewritten, and ones that can.
const inert = [
  '<p>',
  '</p>',
  '<div class="a b">',
  '<span src="a.png">',
  '<imgx src=a.png>',
  '<area href=x download>',
  '<link href=x.css>',
  '<!-- c -->',
  '<!--',
  '-->',
  '<script>',
  '</script>',
  '<style>',
  '</style>',
  '<textarea>',
  '</textarea>',
  '<title>',
  '</title>',
  '<svg>',
  '</svg>',
  '<![CDATA[',
  ']]>',
  '&amp;',
  '&lt;img src=a.png&gt;',
  'img src=a.png',
  ' ',
  '\r\n',
  '\r',
  '\n',
  '\t',
  '"',
  "'",
  '=',
  '<',
  '>',
  '/',
  'text',
  '😀',
  '日本',
  '\u0000',
  '&',
  '#',
  'src=',
  'href=',
  'download',
  '<br/>',
  '<!DOCTYPE html>',
];
const media = [
  '<img src="a.png">',
  '<img src=a.png>',
  "<IMG SRC='./a.png'>",
  '<img srcset="a.png 1x, b.png 2x">',
  '<a href="f.pdf" download>',
  '<a href=f.pdf>',
  '<a data-type="attachment" href=/f.pdf>',
  '<video src=v.mp4 poster=p.png>',
  '<object data=d.pdf>',
  '<img src="http://x/a.png">',
  '<img src="/media/a.png">',
  '<img src="&#47;a&amp;b.png">',
  '<img ',
  'src="a.png"',
  '<source src=',
  'a.png',
  '<a ',
  '<image src=a>',
  '<embed src=e>',
  '<img src="../../x.png">',
  '<img src=/media/../x.png>',
  '<img srcset="a\\..\\..\\b.png 1x, %2e%2E/c.png 2x">',
  '<img src="..&#x2f;..&#47;x.png">',
  "<img src='&#46;.&#92;y.png?v=../1'>",
  '..',
  '../',
  '&#46;',
  '\\',
];
// Fragments such as '<' + 'img src=a.png' can still join into a media tag, so those draws are dropped.
const inertHtml = fc
  .array(fc.constantFrom(...inert), { maxLength: 30 })
  .map((a) => a.join(''))
  .filter((s) => !/<(img|image|source|video|audio|track|embed|object|a)[\s/>]/i.test(s));
const anyHtml = fc.array(fc.constantFrom(...inert, ...media), { maxLength: 30 }).map((a) => a.join(''));

t.test('property: HTML without rewritable tags comes back byte-for-byte (D3.5)', async (t) => {
  fc.assert(
    fc.property(inertHtml, (html) => tokenized(html) === html),
    { numRuns: 500 },
  );
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 60 }), (s) => tokenized(s) === s || mayNeedRewrite(s)),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('property: the splice into the JSON text gives what the string rewrite gives', async (t) => {
  fc.assert(
    fc.property(
      anyHtml,
      (html) => JSON.parse(rewriteJsonText(Buffer.from(JSON.stringify(html)), P).toString('utf8')) === tokenized(html),
    ),
    { numRuns: 1000 },
  );
  t.pass();
});

t.test('property: mayNeedRewrite has no false negatives', async (t) => {
  fc.assert(
    fc.property(anyHtml, (html) => tokenized(html) === html || mayNeedRewrite(html)),
    { numRuns: 1000 },
  );
  fc.assert(
    fc.property(anyHtml, (html) => rewriteHtml(html, P) === tokenized(html)),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('property: a document fed in pieces of any sizes is rewritten as when fed whole', async (t) => {
  fc.assert(
    fc.property(
      anyHtml,
      fc.integer({ min: 0, max: 2 ** 30 }),
      (html, seed) => tokenizedInPieces(html, seed) === tokenized(html),
    ),
    { numRuns: 1500 },
  );
  t.pass();
});

t.test('property: documents fed in pieces, interleaved, are rewritten as each alone', async (t) => {
  fc.assert(
    fc.property(
      fc.array(anyHtml, { minLength: 2, maxLength: 5 }),
      fc.integer({ min: 0, max: 2 ** 30 }),
      (docs, seed) => {
        const alone = docs.map((d) => new HtmlMediaRewriter(P).editsOf(d));
        const got = docs.map(() => [] as Edit[]);
        const rewriters = docs.map((_, i) => new HtmlMediaRewriter(P, (e) => got[i]!.push(e)));
        const at = docs.map(() => 0);
        let rnd = seed | 1;
        // xorshift32: which document takes the next piece, and the piece's length.
        const step = () => ((rnd ^= rnd << 13), (rnd ^= rnd >>> 17), (rnd ^= rnd << 5), rnd >>> 0);
        for (let open = docs.length; open > 0;) {
          const i = step() % docs.length;
          const d = docs[i]!;
          if (at[i]! > d.length) continue;
          const end = Math.min(d.length, at[i]! + 1 + (step() % 7));
          rewriters[i]!.write(d.slice(at[i], end), end === d.length);
          at[i] = end === d.length ? d.length + 1 : end;
          if (end === d.length) open--;
        }
        return JSON.stringify(got) === JSON.stringify(alone);
      },
    ),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('property: rewriting is idempotent (D3.2)', async (t) => {
  fc.assert(
    fc.property(anyHtml, (html) => {
      const once = tokenized(html);
      return tokenized(once) === once;
    }),
    { numRuns: 500 },
  );
  t.pass();
});

t.test(
  'property: every value the rewriter changes resolves inside the prefix, as parsed by a browser (D3.7)',
  async (t) => {
    const inside = (u: string): boolean => !isRelativeUrl(u) || new URL(u, 'http://h/').pathname.startsWith(P);
    const urls = (name: string, v: string): string[] => {
      const out: string[] = [];
      if (name === 'srcset') mapSrcsetUrls(v, (u) => (out.push(u), u));
      return name === 'srcset' ? out : [v];
    };
    fc.assert(
      fc.property(anyHtml, (html) => {
        const before = parsedAttrs(html).flat();
        const after = parsedAttrs(tokenized(html)).flat();
        return (
          before.length === after.length &&
          after.every(([name, v], k) => v === before[k]![1] || urls(name, v).every(inside))
        );
      }),
      { numRuns: 1000 },
    );
    t.pass();
  },
);

t.test('offsets stay right past parse5 dropping its parsed buffer (64 KiB waterline)', async (t) => {
  const big = 'x'.repeat(70_000);
  const input = `<p>${big}\r\n</p><img src="a.png" alt="${big}"><!--${big}--><img\r\nsrc=./b.png>😀${big}<a href=f.pdf download>`;
  const expected = `<p>${big}\r\n</p><img src="/media/a.png" alt="${big}"><!--${big}--><img\r\nsrc=/media/b.png>😀${big}<a href=/media/f.pdf download>`;
  t.equal(rewriteHtml(input, P), expected, 'whole');
  checkPaths(t, input, expected);
});

// A URL transform other than the prefix, as the import uses: the rewriter must find the same
// attributes and escape whatever the transform returns for the attribute's quoting.
const resolve = (u: string): string => (isRelativeUrl(u) ? `/r/${u.trim()}` : u);
const RESOLVE = urlTransformRules(resolve);
const awkward = (u: string): string => (isRelativeUrl(u) ? `/R&D "q" 'x'/${u}` : u);
const AWKWARD = urlTransformRules(awkward);

const transformCases: [string, UrlRewriteRules, string, string][] = [
  ['url value', RESOLVE, '<p><img src="a.png" alt="a.png"></p>', '<p><img src="/r/a.png" alt="a.png"></p>'],
  [
    'every srcset candidate',
    RESOLVE,
    '<img srcset="a.png 1x, https://x.example/b.png 2x,c.png 3x">',
    '<img srcset="/r/a.png 1x, https://x.example/b.png 2x,/r/c.png 3x">',
  ],
  [
    'srcset data: comma and descriptor parentheses',
    RESOLVE,
    '<img srcset="data:image/png;base64,AA 1x, a.png (a, b) 2x">',
    '<img srcset="data:image/png;base64,AA 1x, /r/a.png (a, b) 2x">',
  ],
  [
    'CRLF between srcset candidates kept',
    RESOLVE,
    '<img srcset="a.png 1x,\r\n  b.png 2x">',
    '<img srcset="/r/a.png 1x,\r\n  /r/b.png 2x">',
  ],
  [
    'entities in srcset decoded, result re-encoded',
    RESOLVE,
    '<img srcset="a&amp;b.png 1x, &#99;.png 2x">',
    '<img srcset="/r/a&amp;b.png 1x, /r/c.png 2x">',
  ],
  ['entity in single-quoted value', RESOLVE, "<img src='it&#39;s.png'>", "<img src='/r/it&#39;s.png'>"],
  ['entity-encoded white space in unquoted value', RESOLVE, '<img src=&#97;&#32;b.png>', '<img src=/r/a&#32;b.png>'],
  [
    'bare & is escaped once the value changes',
    RESOLVE,
    '<img src="a.png?x=1&y=2">',
    '<img src="/r/a.png?x=1&amp;y=2">',
  ],
  [
    'entity-encoded scheme still absolute',
    RESOLVE,
    '<img src="&#104;ttp://x.example/a.png">',
    '<img src="&#104;ttp://x.example/a.png">',
  ],
  [
    'a gated by download',
    RESOLVE,
    '<a href="doc">d</a><a href=f.pdf download>f</a>',
    '<a href="doc">d</a><a href=/r/f.pdf download>f</a>',
  ],
  [
    'foreign and raw-text content untouched',
    RESOLVE,
    '<svg><video src=v.mp4></video></svg><!--<img src=a.png>--><script><img src=a.png></script>',
    '<svg><video src=v.mp4></video></svg><!--<img src=a.png>--><script><img src=a.png></script>',
  ],
  ['duplicate attribute: first wins', RESOLVE, '<img src=a.png src=b.png>', '<img src=/r/a.png src=b.png>'],
  ['double-quoted: & and " escaped', AWKWARD, '<img src="a.png">', `<img src="/R&amp;D &quot;q&quot; 'x'/a.png">`],
  ["single-quoted: & and ' escaped", AWKWARD, "<img src='a.png'>", `<img src='/R&amp;D "q" &#39;x&#39;/a.png'>`],
  [
    'unquoted: quotes and white space escaped too',
    AWKWARD,
    '<img src=a.png alt=x>',
    '<img src=/R&amp;D&#32;&quot;q&quot;&#32;&#39;x&#39;/a.png alt=x>',
  ],
];

for (const [name, rules, input, expected] of transformCases) {
  t.test(`transform rules: ${name}`, async (t) => checkPaths(t, input, expected, rules));
}

t.test('rewrittenCount counts changed attribute values', async (t) => {
  const rw = new HtmlMediaRewriter(RESOLVE);
  const out = rw.rewrite('<img src=a.png srcset="b.png 1x, http://x/c.png 2x"><img src="http://x/d.png"><a href=e.pdf');
  t.equal(out, '<img src=/r/a.png srcset="/r/b.png 1x, http://x/c.png 2x"><img src="http://x/d.png"><a href=e.pdf');
  t.equal(rw.rewrittenCount, 2, 'src and srcset; unchanged values and the tag left open at EOF do not count');
  const prefixed = new HtmlMediaRewriter(P);
  prefixed.rewrite('<video src=v.mp4 poster=/media/p.png>');
  t.equal(prefixed.rewrittenCount, 1, 'the prefix path counts too');
});

t.test('property: mapSrcsetUrls splits candidates as rewriteSrcset does', async (t) => {
  const piece = fc.constantFrom(
    'a.png',
    './b.png',
    '/media/c.png',
    'http://x/d',
    'data:x,y',
    '#f',
    ' ',
    '\t',
    '\n',
    ',',
    ',,',
    '1x',
    '480w',
    '(',
    ')',
    '(a, b)',
    '&',
  );
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 20 }), (a) => {
      const v = a.join('');
      return mapSrcsetUrls(v, (u) => rewriteMediaUrl(u, P)) === rewriteSrcset(v, P);
    }),
    { numRuns: 2000 },
  );
  t.pass();
});

/** Every element's attributes as parsed, in document order. */
function parsedAttrs(html: string): [string, string][][] {
  const out: [string, string][][] = [];
  const visit = (n: T.Node): void => {
    if ('tagName' in n) out.push(n.attrs.map((a) => [a.name, a.value]));
    if ('content' in n) visit(n.content);
    if ('childNodes' in n) for (const c of n.childNodes) visit(c);
  };
  visit(parseFragment(html));
  return out;
}

t.test('property: transform output parses to the transformed values', async (t) => {
  fc.assert(
    fc.property(anyHtml, (html) => {
      const out = tokenized(html, AWKWARD);
      const before = parsedAttrs(html);
      const after = parsedAttrs(out);
      if (before.length !== after.length) return false;
      return before.every((attrs, i) => {
        const next = after[i]!;
        return (
          attrs.length === next.length &&
          attrs.every(([name, v], k) => {
            const [name2, v2] = next[k]!;
            return name === name2 && (v2 === v || v2 === awkward(v) || v2 === mapSrcsetUrls(v, awkward));
          })
        );
      });
    }),
    { numRuns: 1000 },
  );
  t.pass();
});
