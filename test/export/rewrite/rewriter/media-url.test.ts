import { normalizeMediaPrefix } from '../../../../src/config.js';
import t from 'tap';
import fc from 'fast-check';
import { rewriteMediaUrl, rewriteSrcset } from '../../../../src/export/rewrite/rewriter/media-url.js';

const P = '/media/';

t.test('normalizeMediaPrefix collapses trailing slashes to one (D3.1)', async (t) => {
  t.equal(normalizeMediaPrefix('/media'), '/media/');
  t.equal(normalizeMediaPrefix('/media/'), '/media/');
  t.equal(normalizeMediaPrefix('/media///'), '/media/');
  t.equal(normalizeMediaPrefix('https://cdn.example/m//'), 'https://cdn.example/m/');
  t.equal(normalizeMediaPrefix('/'), '/');
  t.equal(normalizeMediaPrefix('///'), '/');
  t.equal(normalizeMediaPrefix('/a//b'), '/a//b/', 'only trailing slashes collapse');
});

t.test('normalizeMediaPrefix rejects values unsafe to splice into HTML (D3.1)', async (t) => {
  for (const bad of [
    '',
    ' /media/',
    '/me dia/',
    '/media/\n',
    '/m"/',
    "/m'/",
    '/m</',
    '/m>/',
    '/m&amp;/',
    '/m`/',
    '/m\t/',
  ]) {
    t.throws(() => normalizeMediaPrefix(bad), JSON.stringify(bad));
  }
});

/** decisions.md D3.2 through the function production calls: a relative URL is one that gets the prefix. */
const isRelativeUrl = (u: string): boolean => rewriteMediaUrl(u, '/never-a-prefix-of-these/') !== u;

t.test('relative URLs (D3.2)', async (t) => {
  const relative = [
    'a.png',
    './a.png',
    '/a.png',
    '../a.png',
    '?q=1',
    ' a.png ',
    '1x:y',
    'a_b:c',
    'a b',
    '\\\\host/a',
    'media/a.png',
    '/media/a.png',
    '.',
    '/',
  ];
  const notRelative = [
    '',
    ' ',
    '\t\n\f\r ',
    'http://x/a.png',
    'HTTPS://x',
    'data:image/png,x',
    'blob:https://x/1',
    'mailto:a@b',
    '//cdn/a.png',
    ' //cdn/a.png',
    '#frag',
    ' #frag',
    'javascript:x',
    'web+x.y-z:abc',
    'a:',
    'Z9+.-:x',
  ];
  for (const u of relative) t.equal(isRelativeUrl(u), true, `relative: ${JSON.stringify(u)}`);
  for (const u of notRelative) t.equal(isRelativeUrl(u), false, `not relative: ${JSON.stringify(u)}`);
  // Only ASCII white space is trimmed: a no-break space is content.
  t.equal(isRelativeUrl('\u00a0'), true);
  t.equal(isRelativeUrl('\u00a0http://x'), true);
});

t.test('rewriteMediaUrl (D3.1, D3.2, D3.6)', async (t) => {
  const cases: Array<[string, string]> = [
    ['a.png', '/media/a.png'],
    ['./a.png', '/media/a.png'],
    ['/a.png', '/media/a.png'],
    ['/./a.png', '/media/a.png'],
    ['.//./b/c.png', '/media/b/c.png'],
    ['  a.png \n', '/media/a.png'],
    ['media/a.png', '/media/media/a.png'],
    ['?v=1', '/media/?v=1'],
    ['./', '/media/'],
  ];
  for (const [u, want] of cases) t.equal(rewriteMediaUrl(u, P), want, JSON.stringify(u));
  for (const u of [
    '',
    '   ',
    'http://x/a.png',
    'data:x',
    'blob:x',
    'mailto:x',
    '//x/a',
    '#f',
    '/media/a.png',
    ' /media/a.png ',
    '/media/',
  ]) {
    t.equal(rewriteMediaUrl(u, P), u, `untouched: ${JSON.stringify(u)}`);
  }
  t.equal(rewriteMediaUrl('a.png', 'https://cdn.example/m/'), 'https://cdn.example/m/a.png');
  t.equal(rewriteMediaUrl('https://cdn.example/m/a.png', 'https://cdn.example/m/'), 'https://cdn.example/m/a.png');
});

t.test('rewriteMediaUrl keeps cover.url inside the prefix (D3.7)', async (t) => {
  const examples: Array<[string, string]> = [
    ['../../admin/x.png', '/media/admin/x.png'],
    ['a/./b/../c.png', '/media/a/c.png'],
    ['..\\..\\x.png', '/media/x.png'],
    ['img/%2E%2E/y.png?v=../1', '/media/y.png?v=../1'],
  ];
  for (const [u, want] of examples) t.equal(rewriteMediaUrl(u, P), want, `rule example ${JSON.stringify(u)}`);
  const cases: Array<[string, string, string]> = [
    ['../a.png', '/media/a.png', 'a leading .. is dropped'],
    ['a/./b.png', '/media/a/b.png', 'an inner . segment is dropped'],
    ['.', '/media/', 'a lone . is dropped'],
    ['..', '/media/', 'a lone .. is dropped'],
    ['a/b/..', '/media/a/', 'a trailing .. leaves a directory, as in a browser'],
    ['a/.', '/media/a/', 'a trailing . leaves a directory'],
    ['a/b/../../../../c.png', '/media/c.png', '.. never climbs above the prefix'],
    ['.%2e/%2E./%2e%2E/x.png', '/media/x.png', 'every spelling of an encoded ..'],
    ['a/%2e/b.png', '/media/a/b.png', '%2e is a . segment as the URL standard reads it'],
    ['a\\b\\c.png', '/media/a/b/c.png', 'backslashes become slashes'],
    ['\\\\host\\x.png', '/media/host/x.png', 'a backslash host is kept under the prefix'],
    ['/\\host/x.png', '/media/host/x.png', 'so is a slash-backslash host'],
    ['.\t./x.png', '/media/x.png', 'tab inside .. is stripped by URL parsers, so it is still ..'],
    ['..\n/x.png', '/media/x.png', 'so is a newline'],
    ['a/..\x01', '/media/\x01', 'URL parsers strip C0 controls and spaces that end a URL'],
    ['..\x01?x', '/media/..\x01?x', 'inside a path they are encoded, so not a ..'],
    ['%2\te%2e/x.png', '/media/x.png', 'and a tab inside %2e'],
    ['../a.png#../b', '/media/a.png#../b', 'the fragment is kept as written'],
    ['..?x\\..', '/media/?x\\..', 'the query is kept as written'],
    ['a..b/...png/.x/..y', '/media/a..b/...png/.x/..y', 'dots inside names are not segments'],
    ['a%2eb/%2e%2e%2e/x', '/media/a%2eb/%2e%2e%2e/x', 'nor are longer encoded runs'],
    ['a//b/../c', '/media/a//c', 'empty segments stay, as a browser keeps them'],
    ['..//x.png', '/media/x.png', 'empty segments after a dropped .. are leading ones'],
  ];
  for (const [u, want, why] of cases) t.equal(rewriteMediaUrl(u, P), want, `${JSON.stringify(u)}: ${why}`);
});

t.test('a value that already carries the prefix is normalised only when it could escape (D3.2, D3.7)', async (t) => {
  const cases: Array<[string, string]> = [
    ['/media/../admin/x.png', '/media/admin/x.png'],
    [' /media/a/../../b.png ', '/media/b.png'],
    ['/media/..', '/media/'],
    ['/media/%2E%2e/x.png?v=../1', '/media/x.png?v=../1'],
    ['/media/a\\b.png', '/media/a/b.png'],
    ['/media/./a.png', '/media/a.png'],
  ];
  for (const [u, want] of cases) t.equal(rewriteMediaUrl(u, P), want, JSON.stringify(u));
  for (const u of [
    '/media/a.png',
    ' /media/a.png ',
    '/media//a.png',
    '/media/a..b/c.png',
    '/media/a.png?x=../..',
    '/media/a%2eb.png',
  ]) {
    t.equal(rewriteMediaUrl(u, P), u, `left as it is: ${JSON.stringify(u)}`);
  }
  const cdn = 'https://cdn.example/m/';
  t.equal(rewriteMediaUrl('../x.png', cdn), 'https://cdn.example/m/x.png', 'an absolute prefix confines too');
  const absolute = 'https://cdn.example/m/../x.png';
  t.equal(
    rewriteMediaUrl(absolute, cdn),
    absolute,
    'an absolute URL is never rewritten, even under an absolute prefix (D3.2)',
  );
});

t.test('property: a rewritten URL resolves inside the prefix and rewriting is idempotent (D3.7)', async (t) => {
  // Characters that make dot segments, separators, encodings and what URL parsers strip
  // (tab and newlines anywhere, C0 controls and spaces at the end).
  const tricky = fc.constantFrom(
    '.',
    '.',
    '/',
    '\\',
    '%',
    '2',
    'e',
    'E',
    '%2e',
    '%2E',
    '..',
    '?',
    '#',
    '\t',
    '\n',
    '\r',
    '\f',
    ' ',
    'a',
    'm',
    'media',
    ':',
    '\u00a0',
    '\0',
    '\x01',
    '\x1f',
    '😀',
  );
  const u = fc.oneof(
    fc.array(tricky, { maxLength: 16 }).map((a) => a.join('')),
    fc.array(tricky, { maxLength: 12 }).map((a) => P + a.join('')),
    fc.string({ unit: 'binary', maxLength: 24 }),
  );
  fc.assert(
    fc.property(u, (u) => {
      const r = rewriteMediaUrl(u, P);
      if (rewriteMediaUrl(r, P) !== r) return false;
      return r === u || new URL(r, 'http://h/').pathname.startsWith(P);
    }),
    { numRuns: 5000 },
  );
  t.pass('properties hold');
});

t.test('rewriteSrcset (D3.3)', async (t) => {
  const cases: Array<[string, string]> = [
    ['a.png', '/media/a.png'],
    ['a.png 1x, b.png 2x', '/media/a.png 1x, /media/b.png 2x'],
    ['  a.png,  ./b.png 2x ,c.png  ', '  /media/a.png,  /media/b.png 2x ,/media/c.png  '],
    ['a.png,,, b.png', '/media/a.png,,, /media/b.png'],
    [',a.png', ',/media/a.png'],
    ['a.png (a, b) 1x, b.png 2x', '/media/a.png (a, b) 1x, /media/b.png 2x'],
    ['a.png (unclosed, b.png 2x', '/media/a.png (unclosed, b.png 2x'],
    ['data:image/png;base64,AA 1x, b.png 2x', 'data:image/png;base64,AA 1x, /media/b.png 2x'],
    ['https://x/a.png 1x,/media/b.png 2x, //c/d.png', 'https://x/a.png 1x,/media/b.png 2x, //c/d.png'],
    ['a.png\t480w,\nb.png 800w', '/media/a.png\t480w,\n/media/b.png 800w'],
    ['../../a.png 1x, b/./../c.png?v=../1 2x', '/media/a.png 1x, /media/c.png?v=../1 2x'],
    ['..\\x.png 1x,/media/../y.png 2x,/media/z.png 3x', '/media/x.png 1x,/media/y.png 2x,/media/z.png 3x'],
    ['', ''],
    [' , ', ' , '],
  ];
  for (const [v, want] of cases) t.equal(rewriteSrcset(v, P), want, JSON.stringify(v));
});

t.test('properties', async (t) => {
  const urlChars = fc.constantFrom(
    'a',
    'B',
    '.',
    '/',
    ':',
    '#',
    ' ',
    '\t',
    '\n',
    '+',
    '-',
    '1',
    '?',
    '=',
    '&',
    'é',
    '😀',
    'm',
    'e',
    'd',
    'i',
  );
  const url = fc.oneof(
    fc.array(urlChars, { maxLength: 12 }).map((a) => a.join('')),
    fc.constantFrom('http://x/a.png', '/media/a', 'media/a', './/a', 'data:,x', '//x/y'),
  );
  // The rewrite always either returns u or a value the prefix makes idempotent.
  fc.assert(
    fc.property(url, (u) => {
      const r = rewriteMediaUrl(u, P);
      if (r !== u) {
        if (!isRelativeUrl(u) || !r.startsWith(P)) return false;
      }
      return rewriteMediaUrl(r, P) === r;
    }),
  );
  // A srcset of candidates that need no rewrite comes back unchanged.
  fc.assert(
    fc.property(
      fc.array(
        fc.tuple(
          fc.constantFrom('http://x/a.png', '/media/b.png', '#f', 'data:x,y'),
          fc.constantFrom('', ' 1x', ' 480w', ' (a, b) 2x'),
          fc.constantFrom(',', ', ', ' ,\n'),
        ),
        { maxLength: 5 },
      ),
      (cands) => {
        const v = cands.map(([u, d, sep]) => u + d + sep).join('');
        return rewriteSrcset(v, P) === v;
      },
    ),
  );
  // Removing the prefix from every rewritten srcset leaves the non-URL bytes intact.
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom('a.png', ' ', ',', '1x', '(', ')', 'x,y', '\t', 'b'), { maxLength: 12 }),
      (parts) => {
        const v = parts.join('');
        const r = rewriteSrcset(v, P);
        return rewriteSrcset(r, P) === r;
      },
    ),
  );
  t.pass('properties hold');
});
