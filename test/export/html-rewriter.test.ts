import t from 'tap';
import { prng } from '../../bench/generate.js';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { HtmlMediaRewriter, mayNeedRewrite, rewriteHtml } from '../../src/export/html-rewriter.js';

interface Case {
  rule: string;
  name: string;
  input: string;
  expected: string;
}

const P = '/media/';
const cases = JSON.parse(
  readFileSync(new URL('./fixtures/rewriter-cases.json', import.meta.url), 'utf8'),
) as Case[];

function runChunks(chunks: string[]): string {
  const rw = new HtmlMediaRewriter(P);
  let out = '';
  for (const c of chunks) out += rw.write(c);
  return out + rw.end();
}


function randomChunks(s: string, seed: number, maxSize: number): string[] {
  const rnd = prng(seed);
  const out: string[] = [];
  for (let i = 0; i < s.length; ) {
    const n = 1 + Math.floor(rnd() * maxSize);
    out.push(s.slice(i, i + n));
    i += n;
  }
  return out;
}

t.test('fixture file covers every rule of D3 that applies to HTML', async (t) => {
  const rules = new Set(cases.map((c) => c.rule));
  for (const r of ['D3.1', 'D3.2', 'D3.3', 'D3.4', 'D3.5']) t.ok(rules.has(r), r);
  t.equal(new Set(cases.map((c) => c.name)).size, cases.length, 'case names are unique');
});

for (const c of cases) {
  t.test(`${c.rule} ${c.name}`, async (t) => {
    t.equal(rewriteHtml(c.input, P), c.expected, 'whole string');
    t.equal(runChunks([c.input]), c.expected, 'one write + end');
    for (let i = 0; i <= c.input.length; i++) {
      const got = runChunks([c.input.slice(0, i), c.input.slice(i)]);
      if (got !== c.expected) t.equal(got, c.expected, `split at ${i}`);
    }
    for (let seed = 1; seed <= 8; seed++) {
      const chunks = randomChunks(c.input, seed, 1 + (seed % 5) * 3);
      const got = runChunks(chunks);
      if (got !== c.expected) t.equal(got, c.expected, `seed ${seed}: ${JSON.stringify(chunks)}`);
    }
    t.equal(runChunks(c.input.split('')), c.expected, 'one code unit per chunk');
    t.equal(rewriteHtml(c.expected, P), c.expected, 'idempotent');
    if (c.expected !== c.input) t.ok(mayNeedRewrite(c.input), 'mayNeedRewrite has no false negative');
  });
}

t.test('output is returned as soon as it is final', async (t) => {
  const rw = new HtmlMediaRewriter(P);
  t.equal(rw.write('<p>hello</p>'), '<p>hello</p>');
  t.equal(rw.write('<img src="a'), '', 'an unfinished start tag is held back');
  t.equal(rw.write('.png">tail '), '<img src="/media/a.png">tail ');
  t.equal(rw.write('<'), '', 'a < that may open a tag is held back');
  t.equal(rw.write('b>x'), '<b>x');
  t.equal(rw.end(), '');
  t.equal(rw.end(), '', 'end is idempotent');
  t.throws(() => rw.write('x'), 'write after end throws');
});

t.test('held-back input stays bounded by the open token', async (t) => {
  const rw = new HtmlMediaRewriter(P);
  let out = '';
  const para = '<p>' + 'x'.repeat(1000) + '</p>';
  let held = 0;
  for (let i = 0; i < 200; i++) {
    const piece = para + '<img src=a.png>';
    const before = out.length;
    out += rw.write(piece);
    held = Math.max(held, (i + 1) * (piece.length + 7) - out.length);
    t.ok(out.length > before || i === 0, 'each write returns output');
  }
  out += rw.end();
  t.ok(held < 2 * para.length, `held at most ${held} code units`);
  t.equal(out, (para + '<img src=/media/a.png>').repeat(200));
});

t.test('mayNeedRewrite', async (t) => {
  for (const s of ['<img', '<IMG src', '<a href download', '<A\nDOWNLOAD', '<a data-type="&#97;ttachment" href=x>', '<image/', '<source>', '<Video', '<audio\t', '<track\f', '<embed\r', '<object ', 'x<a>download']) {
    t.ok(mayNeedRewrite(s), s);
  }
  for (const s of ['', 'img src=a.png', '&lt;img src=a.png>', '<p>', '<abbr>', '<imgx>', '<area href>', '<i>', '< img src=a>', '<my-img src=a>', '<a href="doc">', '<A HREF=x.pdf>', 'download <b>x</b>']) {
    t.notOk(mayNeedRewrite(s), s);
  }
});

// Building blocks for random HTML: tags that can never be rewritten, and ones that can.
const inert = [
  '<p>', '</p>', '<div class="a b">', '<span src="a.png">', '<imgx src=a.png>', '<area href=x download>', '<link href=x.css>',
  '<!-- c -->', '<!--', '-->', '<script>', '</script>', '<style>', '</style>', '<textarea>', '</textarea>', '<title>', '</title>',
  '<svg>', '</svg>', '<![CDATA[', ']]>', '&amp;', '&lt;img src=a.png&gt;', 'img src=a.png', ' ', '\r\n', '\r', '\n', '\t',
  '"', "'", '=', '<', '>', '/', 'text', '😀', '日本', '\u0000', '&', '#', 'src=', 'href=', 'download', '<br/>', '<!DOCTYPE html>',
];
const media = [
  '<img src="a.png">', '<img src=a.png>', "<IMG SRC='./a.png'>", '<img srcset="a.png 1x, b.png 2x">', '<a href="f.pdf" download>',
  '<a href=f.pdf>', '<a data-type="attachment" href=/f.pdf>', '<video src=v.mp4 poster=p.png>', '<object data=d.pdf>',
  '<img src="http://x/a.png">', '<img src="/media/a.png">', '<img src="&#47;a&amp;b.png">', '<img ', 'src="a.png"', '<source src=',
  'a.png', '<a ', '<image src=a>', '<embed src=e>',
];
// Fragments such as '<' + 'img src=a.png' can still join into a media tag, so those draws are dropped.
const inertHtml = fc
  .array(fc.constantFrom(...inert), { maxLength: 30 })
  .map((a) => a.join(''))
  .filter((s) => !/<(img|image|source|video|audio|track|embed|object|a)[\s/>]/i.test(s));
const anyHtml = fc.array(fc.constantFrom(...inert, ...media), { maxLength: 30 }).map((a) => a.join(''));
const cutPoints = fc.array(fc.nat(), { maxLength: 6 });

function cut(s: string, points: number[]): string[] {
  const at = [...new Set(points.map((p) => p % (s.length + 1)))].sort((a, b) => a - b);
  const out: string[] = [];
  let prev = 0;
  for (const p of at) {
    out.push(s.slice(prev, p));
    prev = p;
  }
  out.push(s.slice(prev));
  return out;
}

t.test('property: HTML without rewritable tags comes back byte-for-byte (D3.5)', async (t) => {
  fc.assert(
    fc.property(inertHtml, cutPoints, (html, points) => runChunks([html]) === html && runChunks(cut(html, points)) === html),
    { numRuns: 500 },
  );
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 60 }), (s) => runChunks([s]) === s || mayNeedRewrite(s)),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('property: chunking never changes the output', async (t) => {
  fc.assert(
    fc.property(anyHtml, cutPoints, (html, points) => runChunks(cut(html, points)) === runChunks([html])),
    { numRuns: 1000 },
  );
  t.pass();
});

t.test('property: mayNeedRewrite has no false negatives', async (t) => {
  fc.assert(
    fc.property(anyHtml, (html) => runChunks([html]) === html || mayNeedRewrite(html)),
    { numRuns: 1000 },
  );
  fc.assert(
    fc.property(anyHtml, (html) => rewriteHtml(html, P) === runChunks([html])),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('property: rewriting is idempotent (D3.2)', async (t) => {
  fc.assert(
    fc.property(anyHtml, (html) => {
      const once = runChunks([html]);
      return runChunks([once]) === once;
    }),
    { numRuns: 500 },
  );
  t.pass();
});

t.test('offsets stay right past parse5 dropping its parsed buffer (64 KiB waterline)', async (t) => {
  const big = 'x'.repeat(70_000);
  const input = `<p>${big}\r\n</p><img src="a.png" alt="${big}"><!--${big}--><img\r\nsrc=./b.png>😀${big}<a href=f.pdf download>`;
  const expected = `<p>${big}\r\n</p><img src="/media/a.png" alt="${big}"><!--${big}--><img\r\nsrc=/media/b.png>😀${big}<a href=/media/f.pdf download>`;
  t.equal(rewriteHtml(input, P), expected, 'whole');
  for (const seed of [1, 2, 3]) {
    t.equal(runChunks(randomChunks(input, seed, 9000)), expected, `random chunks, seed ${seed}`);
  }
  t.equal(runChunks(randomChunks(input, 4, 3)), expected, 'tiny chunks');
});
