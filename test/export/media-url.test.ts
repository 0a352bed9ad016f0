import t from 'tap';
import fc from 'fast-check';
import {
  isRelativeUrl,
  normalizeMediaPrefix,
  rewriteMediaUrl,
  rewriteSrcset,
} from '../../src/export/media-url.js';

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
  for (const bad of ['', ' /media/', '/me dia/', '/media/\n', '/m"/', "/m'/", '/m</', '/m>/', '/m&amp;/', '/m`/', '/m\t/']) {
    t.throws(() => normalizeMediaPrefix(bad), JSON.stringify(bad));
  }
});

t.test('isRelativeUrl (D3.2)', async (t) => {
  const relative = ['a.png', './a.png', '/a.png', '../a.png', '?q=1', ' a.png ', '1x:y', 'a_b:c', 'a b', '\\\\host/a', 'media/a.png', '/media/a.png', '.', '/'];
  const notRelative = [
    '', ' ', '\t\n\f\r ', 'http://x/a.png', 'HTTPS://x', 'data:image/png,x', 'blob:https://x/1', 'mailto:a@b',
    '//cdn/a.png', ' //cdn/a.png', '#frag', ' #frag', 'javascript:x', 'web+x.y-z:abc', 'a:', 'Z9+.-:x',
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
    ['../a.png', '/media/../a.png'],
    ['a/./b.png', '/media/a/./b.png'],
    ['  a.png \n', '/media/a.png'],
    ['media/a.png', '/media/media/a.png'],
    ['?v=1', '/media/?v=1'],
    ['./', '/media/'],
    ['.', '/media/.'],
  ];
  for (const [u, want] of cases) t.equal(rewriteMediaUrl(u, P), want, JSON.stringify(u));
  for (const u of ['', '   ', 'http://x/a.png', 'data:x', 'blob:x', 'mailto:x', '//x/a', '#f', '/media/a.png', ' /media/a.png ', '/media/']) {
    t.equal(rewriteMediaUrl(u, P), u, `untouched: ${JSON.stringify(u)}`);
  }
  t.equal(rewriteMediaUrl('a.png', 'https://cdn.example/m/'), 'https://cdn.example/m/a.png');
  t.equal(rewriteMediaUrl('https://cdn.example/m/a.png', 'https://cdn.example/m/'), 'https://cdn.example/m/a.png');
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
    ['', ''],
    [' , ', ' , '],
  ];
  for (const [v, want] of cases) t.equal(rewriteSrcset(v, P), want, JSON.stringify(v));
});

t.test('properties', async (t) => {
  const urlChars = fc.constantFrom('a', 'B', '.', '/', ':', '#', ' ', '\t', '\n', '+', '-', '1', '?', '=', '&', 'é', '😀', 'm', 'e', 'd', 'i');
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
      fc.array(fc.tuple(fc.constantFrom('http://x/a.png', '/media/b.png', '#f', 'data:x,y'), fc.constantFrom('', ' 1x', ' 480w', ' (a, b) 2x'), fc.constantFrom(',', ', ', ' ,\n')), { maxLength: 5 }),
      (cands) => {
        const v = cands.map(([u, d, sep]) => u + d + sep).join('');
        return rewriteSrcset(v, P) === v;
      },
    ),
  );
  // Removing the prefix from every rewritten srcset leaves the non-URL bytes intact.
  fc.assert(
    fc.property(fc.array(fc.constantFrom('a.png', ' ', ',', '1x', '(', ')', 'x,y', '\t', 'b'), { maxLength: 12 }), (parts) => {
      const v = parts.join('');
      const r = rewriteSrcset(v, P);
      return rewriteSrcset(r, P) === r;
    }),
  );
  t.pass('properties hold');
});
