/**
 * Where a media URL of an export is kept below --media-dir (src/backup/media-path.ts): its path
 * below the prefix, each segment percent-decoded, read as a browser reads the URL; refused, with
 * why, when it leaves the prefix or a segment is empty, a dot segment, or decodes to a name with
 * `/`, `\`, NUL or a control character. A root-relative prefix is resolved against --server, an
 * absolute one used as it is. The manifest's order puts kept paths first, then refused URLs.
 */
import t from 'tap';
import { compareRefs, keyCompare, MediaUrls, trimAscii, type MediaRef } from '../../src/backup/media-path.js';
import { prng } from '../../src/generate/random.js';

const rel = new MediaUrls('/media/', 'http://127.0.0.1:3000/base');

t.test('a path below the prefix, decoded segment by segment; query and fragment dropped', async (t) => {
  t.same(rel.refOf('/media/uploads/a%20b.png?w=800&h=600#top'), {
    path: 'uploads/a b.png',
    url: '/media/uploads/a%20b.png?w=800&h=600#top',
  });
  t.same(rel.refOf('/media/%E8%AD%B0%E4%BA%8B%E9%8C%B2.docx').path, '議事録.docx');
  t.same(rel.refOf('/media/export%20(1).zip').path, 'export (1).zip');
  t.same(rel.refOf('/media/a/./b/../c.png').path, 'a/c.png', 'dot segments resolved inside the prefix');
  t.equal(
    rel.fetchUrl('/media/x.png?v=2#f')!.href,
    'http://127.0.0.1:3000/media/x.png?v=2',
    'a root-relative URL on the server, fragment dropped',
  );
  t.equal(rel.prefixUrl.href, 'http://127.0.0.1:3000/media/');
});

t.test('an absolute prefix is used as it is', async (t) => {
  const abs = new MediaUrls('https://cdn.example.com/m/', 'http://127.0.0.1:3000');
  t.ok(abs.matches('https://cdn.example.com/m/x.png'));
  t.notOk(abs.matches('/m/x.png'));
  t.same(abs.refOf('https://cdn.example.com/m/a/b.png').path, 'a/b.png');
  t.equal(abs.fetchUrl('https://cdn.example.com/m/a/b.png')!.origin, 'https://cdn.example.com');
  t.match(abs.refOf('https://cdn.example.com/m/../x.png'), { path: null, why: /outside the prefix/ });
});

t.test('refused: whatever would leave DIR or name no file', async (t) => {
  const refused: [string, RegExp][] = [
    ['/media/../etc/passwd', /outside the prefix/],
    ['/media/%2e%2e/%2E%2E/etc/passwd', /outside the prefix/],
    ['/media/a\\..\\..\\x', /outside the prefix/],
    ['/media/..%2f..%2fetc%2fpasswd', /decodes to a name with "\/"/],
    ['/media/a%5C..%5Cb.png', /decodes to a name with/],
    ['/media/nul%00.png', /control character/],
    ['/media/line%0Abreak.png', /control character/],
    ['/media//etc/passwd', /empty path segment/],
    ['/media/folder/', /empty path segment/],
    ['/media/', /empty path segment/],
    ['/media/bad%zz.png', /bad percent-encoding/],
    ['/media/bad%FF.png', /bad percent-encoding/],
    [`/media/${'n'.repeat(256)}.png`, /longer than 255 bytes/],
  ];
  for (const [url, why] of refused) {
    const ref = rel.refOf(url);
    t.equal(ref.path, null, url);
    t.match(ref.why, why, url);
  }
});

t.test('matches: the value trimmed starts with the prefix, exactly', async (t) => {
  t.equal(trimAscii(' \t/media/x.png\n'), '/media/x.png');
  t.ok(rel.matches('/media/x.png'));
  t.notOk(rel.matches('/Media/x.png'));
  t.notOk(rel.matches('https://example.com/media/x.png'));
  t.notOk(rel.matches('/mediax.png'));
});

t.test("the manifest's order: paths first by path, then refused URLs; the URL breaks ties", async (t) => {
  const refs: MediaRef[] = [
    { path: null, url: '/media/../b' },
    { path: 'b.png', url: '/media/b.png' },
    { path: 'a/b.png', url: '/media/a/b.png?v=2' },
    { path: null, url: '/media/../a' },
    { path: 'a/b.png', url: '/media/a/b.png?v=1' },
  ];
  t.same(
    [...refs].sort(compareRefs).map((r) => r.path ?? r.url),
    ['a/b.png', 'a/b.png', 'b.png', '/media/../a', '/media/../b'],
  );
  t.equal([...refs].sort(compareRefs)[0]!.url, '/media/a/b.png?v=1');
  t.equal(keyCompare(refs[2]!, refs[4]!), 0, 'one path, one entry, whatever the query');
});

t.test("refOf's shortcut for plain names agrees with the URL parser on random URLs", async (t) => {
  // Characters that the parser resolves, encodes, decodes or cuts at, beside plain ones.
  const alphabet = [
    'a',
    'Z',
    '0',
    '-',
    '_',
    '~',
    '.',
    '.',
    '/',
    '/',
    '%2e',
    '%2F',
    '%',
    '\\',
    '?',
    '#',
    ' ',
    'é',
    ':',
    '@',
  ];
  const prefixes: [string, string | null][] = [
    ['/media/', 'http://127.0.0.1:3000/base'],
    ['/media/', null],
    ['https://cdn.example.com/m/', 'http://127.0.0.1:3000'],
    ['https://CDN.example.com/m/', null],
    ['/media', 'http://127.0.0.1:3000'],
    ['/a%20b/', null],
  ];
  const next = prng(42);
  const random = (n: number) => Math.floor(next() * n);
  let shortcut = 0;
  for (const [prefix, server] of prefixes) {
    const media = new MediaUrls(prefix, server);
    for (let i = 0; i < 4000; i++) {
      let tail = '';
      const length = 1 + random(12);
      for (let k = 0; k < length; k++) tail += alphabet[random(i % 3 === 0 ? 7 : alphabet.length)];
      const value = prefix + tail;
      const want = media.parsedRef(value);
      const got = media.refOf(value);
      if (got.path !== want.path || got.why !== want.why)
        t.fail(`${value}: ${JSON.stringify(got)} ≠ ${JSON.stringify(want)}`);
      if (got.path !== null && !/[%\\?#]/.test(value)) shortcut++;
    }
  }
  t.ok(shortcut > 1000, `the shortcut was taken (${shortcut} plain URLs)`);
  t.same(rel.refOf(`/media/${'a'.repeat(256)}`), rel.parsedRef(`/media/${'a'.repeat(256)}`), 'a name too long');
  t.equal(rel.refOf('/media/a/../b').path, 'b', 'a dot segment goes to the parser');
});
