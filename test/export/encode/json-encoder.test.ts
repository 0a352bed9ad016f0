/**
 * The hand-written JSON encoder (src/export/encode/json-encoder.ts) and the document encoder built on it
 * (src/export/encode/document-encoder.ts) against JSON.stringify/JSON.parse, on adversarial strings:
 * quotes, backslashes, every control character, U+007F, U+2028/2029, lone and paired surrogates,
 * astral characters and `</script>`. Fixed cases plus fast-check properties.
 *
 * JsonChunker collects UTF-8 bytes. Document rows are built from stored values with rowFromValues
 * (JSON.stringify standing in for PostgreSQL's to_json); stored values are first made what
 * PostgreSQL text can hold (valid UTF-8, so no lone surrogate), while JsonChunker is tested on
 * arbitrary strings. document-encoder.test.ts checks rowFromValues against PostgreSQL.
 */
import type { BookRow } from '../../../src/export/request/book.js';
import { DOC, documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';
import t from 'tap';
import { encodeStaged } from '../../helpers/plans.js';
import fc from 'fast-check';
import { JsonChunker } from '../../../src/export/encode/json-encoder.js';
import { encodeClosing, encodeOpening } from '../../../src/export/encode/document-encoder.js';
import { rewriteHtml } from '../../../src/export/rewrite/rewriter/html-rewriter.js';
import { rewriteMediaUrl } from '../../../src/export/rewrite/rewriter/media-url.js';
import { FIELD, rowFromValues, type DocumentValues } from '../../../bench/lib/rows.js';

const PREFIX = '/media/';

const CONTROLS = Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(i));
/** An ASCII-only label for a string: TAP output must not carry raw U+2028 or control characters. */
const label = (s: string) =>
  JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

const ADVERSARIAL: string[] = [
  '',
  '"',
  '\\',
  '\\"',
  '"\\"',
  '\\u0000',
  ...CONTROLS,
  CONTROLS.join(''),
  '\u007f',
  '\u2028',
  '\u2029',
  'a\u2028b\u2029c',
  '\ud800', // lone high surrogate
  '\udfff', // lone low surrogate
  '\udc00\ud800', // reversed pair: two lone surrogates
  'x\ud83dy', // high surrogate followed by a non-surrogate
  '\ud83d\ude80', // paired: 🚀
  '😀𝄞𐍈', // astral characters
  '</script>',
  '</script><script>alert(1)</script>',
  '<!--',
  ']}',
  '],"meta":{"count":0}}',
  'naïve café Straße 日本語 документ κόσμος',
  '\ufeff',
  '\uffff',
  '\u0000\u001f\u007f\u0080\u009f',
];

/** Strings of arbitrary UTF-16 code units: lone surrogates included. */
const codeUnitString = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n)) });
/** Strings biased towards the characters that need escaping. */
const nastyChar = fc.oneof(
  fc.constantFrom(
    ...CONTROLS,
    '"',
    '\\',
    '/',
    '\u007f',
    '\u2028',
    '\u2029',
    '\ud800',
    '\udfff',
    '\ud83d\ude80',
    '<',
    '>',
    '&',
  ),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
const nastyString = fc.string({ unit: nastyChar });
const anyString = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), codeUnitString, nastyString);

/** Everything a chunker holds, as one Buffer. */
const drain = (c: JsonChunker): Buffer => Buffer.concat(c.takeChunks());

t.test('JsonChunker: adversarial strings pushed as JSON text, in chunks of every small size, parse back', async (t) => {
  for (const size of [1, 2, 3, 7, 64]) {
    for (const s of ADVERSARIAL) {
      const c = new JsonChunker(size);
      const parts: Buffer[] = [];
      for (const piece of ['[', JSON.stringify(s), ',', JSON.stringify(s), ']']) {
        c.push(piece);
        if (c.full) parts.push(drain(c));
      }
      parts.push(drain(c));
      const back = JSON.parse(Buffer.concat(parts).toString('utf8')) as string[];
      // A lone surrogate has no UTF-8 form: JSON.stringify escapes it, so the text stays ASCII.
      if (back[0] !== s || back[1] !== s) t.fail(`chunk size ${size}: ${label(s)}`);
    }
  }
  t.pass('every string came back');
});

t.test('JsonChunker: fixed behaviour of full and takeChunks (bytes)', async (t) => {
  const c = new JsonChunker(4);
  t.equal(c.chunkSize, 4);
  t.same(c.takeChunks(), [], 'nothing to take from an empty chunker');
  t.notOk(c.full);
  c.push('ab');
  t.notOk(c.full, '2 < 4');
  c.push(Buffer.from('c'));
  t.notOk(c.full, '3 < 4');
  c.push('');
  c.push(Buffer.alloc(0));
  c.push('d');
  t.ok(c.full, 'full at exactly chunkSize: empty pushes added nothing');
  c.push('efg');
  t.ok(c.full, 'still full beyond chunkSize');
  t.equal(drain(c).toString('utf8'), 'abcdefg');
  t.notOk(c.full, 'not full after takeChunks');
  t.equal(drain(c).length, 0);
  t.equal(new JsonChunker().chunkSize, 64 * 1024, 'default chunk size');
  // Size is counted in UTF-8 bytes.
  const d = new JsonChunker(4);
  d.push('😀');
  t.ok(d.full, 'one astral character is four bytes');
  const e = new JsonChunker(5);
  e.push('é');
  t.notOk(e.full, 'é is two bytes');
  e.push('日');
  t.ok(e.full, '日 three');
  t.strictSame(drain(e), Buffer.from('é日'), 'strings are taken as UTF-8');
  const f = new JsonChunker(100);
  f.push(Buffer.from('x'));
  const pushed = Buffer.from('y');
  f.takeChunks();
  f.push(pushed);
  const taken = f.takeChunks();
  t.strictSame(taken, [Buffer.from('y')], 'a small part comes back in a chunk of its own bytes');
  t.not(taken[0], pushed, 'copied: the chunker holds no reference to the pieces it was given');
  const g = new JsonChunker(4);
  const big = Buffer.from('large');
  g.push('{');
  g.push(big);
  g.push('}');
  const chunks = g.takeChunks();
  t.strictSame(chunks.map(String), ['{', 'large', '}']);
  t.equal(chunks[1], big, 'a part of a chunk or more is passed on as the same Buffer');
});

t.test('JsonChunker: a chunk size above 256 KiB loses no bytes and fills buffers of at most 256 KiB', async (t) => {
  const KiB = 1024;
  const sizes = [
    300 * KiB,
    10,
    200 * KiB,
    256 * KiB - 1,
    256 * KiB,
    256 * KiB + 1,
    600 * KiB,
    1,
    70 * KiB,
    250 * KiB,
    5,
  ];
  const pieces: Buffer[] = sizes.map((n, i) => Buffer.alloc(n, 0x61 + i));
  for (const chunkSize of [256 * KiB + 1, 1024 * KiB, 4096 * KiB]) {
    const c = new JsonChunker(chunkSize);
    const taken: Buffer[] = [];
    for (const piece of pieces) {
      c.push(piece);
      if (c.full) taken.push(...c.takeChunks());
    }
    taken.push(...c.takeChunks());
    t.ok(Buffer.concat(taken).equals(Buffer.concat(pieces)), `chunk size ${chunkSize}: every byte, in order`);
    const copied = taken.filter((b) => !pieces.includes(b));
    t.ok(
      copied.every((b) => b.length <= 256 * KiB),
      `chunk size ${chunkSize}: what was copied sits in buffers of at most 256 KiB`,
    );
  }
});

t.test('JsonChunker: a buffer is filled again only once every chunk cut from it was released', async (t) => {
  /** Fills `n` bytes in two pieces: one piece of a buffer's size would go on uncopied. */
  const fill = (c: JsonChunker, ch: string, n: number) => {
    c.push(ch.repeat(n >> 1));
    c.push(ch.repeat(n - (n >> 1)));
  };
  const c = new JsonChunker(1024);
  fill(c, 'a', 1024);
  const [first] = c.takeChunks();
  fill(c, 'b', 1024);
  const [second] = c.takeChunks();
  t.not(second!.buffer, first!.buffer, 'a buffer with a chunk out is not filled again');
  t.equal(first!.toString(), 'a'.repeat(1024), 'the chunk out is unchanged');
  c.release(first!);
  c.release(first!);
  fill(c, 'c', 1024);
  const [third] = c.takeChunks();
  t.equal(third!.buffer, first!.buffer, 'a released buffer is filled again');
  fill(c, 'd', 1024);
  const [fourth] = c.takeChunks();
  t.not(fourth!.buffer, first!.buffer, 'a second release of the same chunk freed nothing more');
  t.equal(third!.toString(), 'c'.repeat(1024));

  // Two chunks cut from one buffer: the buffer waits for both.
  const d = new JsonChunker(2048);
  d.push('x'.repeat(600));
  const [a] = d.takeChunks();
  d.push('y'.repeat(1448));
  const [b] = d.takeChunks();
  t.equal(a!.buffer, b!.buffer, 'both chunks cut from one buffer');
  d.release(a!);
  fill(d, 'z', 2048);
  const [e] = d.takeChunks();
  t.not(e!.buffer, a!.buffer, 'one chunk still out keeps the buffer');
  t.equal(b!.toString(), 'y'.repeat(1448));
  d.release(b!);
  fill(d, 'w', 2048);
  const [f] = d.takeChunks();
  t.equal(f!.buffer, a!.buffer, 'filled again once both are back');

  const g = new JsonChunker(1024);
  fill(g, 'a', 1024);
  const [kept] = g.takeChunks();
  g.keep(kept!);
  g.release(kept!);
  fill(g, 'b', 1024);
  t.not(g.takeChunks()[0]!.buffer, kept!.buffer, "a kept chunk's buffer is never filled again");
  t.equal(kept!.toString(), 'a'.repeat(1024));

  const h = new JsonChunker(100);
  const big = Buffer.alloc(500, 0x61);
  h.push(big);
  const [passed] = h.takeChunks();
  h.release(passed!);
  h.push('q'.repeat(100));
  t.equal(big.toString(), 'a'.repeat(500), 'a piece that went on uncopied is never written into');
});

t.test(
  'property: chunks released at random points keep their bytes until released, and all bytes arrive',
  async (t) => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3000 }),
        fc.array(fc.oneof(fc.integer({ min: 1, max: 4000 }), fc.constant(-1), fc.constant(-2)), { maxLength: 60 }),
        fc.integer(),
        (chunkSize, ops, seed) => {
          const c = new JsonChunker(chunkSize);
          const pushed: Buffer[] = [];
          const taken: Buffer[] = [];
          const out: { chunk: Buffer; copy: Buffer }[] = [];
          let n = 0;
          let r = seed >>> 0;
          const rand = () => (r = (Math.imul(r, 1664525) + 1013904223) >>> 0) / 2 ** 32;
          const check = () => out.every((o) => o.chunk.equals(o.copy));
          for (const op of ops) {
            if (op > 0) {
              const b = Buffer.alloc(op, 0x21 + (n++ % 90));
              pushed.push(b);
              c.push(b);
            }
            if (op === -1 || c.full) {
              for (const chunk of c.takeChunks()) {
                taken.push(Buffer.from(chunk));
                out.push({ chunk, copy: Buffer.from(chunk) });
              }
            }
            if (op === -2 && out.length > 0) {
              const [o] = out.splice(Math.floor(rand() * out.length), 1);
              if (!check()) return false;
              c.release(o!.chunk);
              if (rand() < 0.2) c.release(o!.chunk);
            }
            if (!check()) return false;
          }
          for (const chunk of c.takeChunks()) taken.push(Buffer.from(chunk));
          return check() && Buffer.concat(taken).equals(Buffer.concat(pushed));
        },
      ),
      { numRuns: 500 },
    );
    t.pass('500 runs');
  },
);

/** Pushes: strings (lone surrogates included) or Buffers. */
const pushArb = fc.oneof(
  fc.record({ push: anyString }),
  fc.record({ push: anyString.map((s) => Buffer.from(s)) }),
  fc.constant({ take: true as const }),
);

t.test('property: JsonChunker pushes and takes at arbitrary points concatenate to the pushed bytes', async (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 64 }), fc.array(pushArb, { maxLength: 40 }), (chunkSize, ops) => {
      const c = new JsonChunker(chunkSize);
      const pushed: Buffer[] = [];
      const taken: Buffer[] = [];
      let pending = 0;
      for (const o of ops) {
        if ('push' in o) {
          c.push(o.push);
          // A string is taken as UTF-8 (a lone surrogate, which JSON text never holds raw, as U+FFFD).
          const b = typeof o.push === 'string' ? Buffer.from(o.push, 'utf8') : o.push;
          pushed.push(b);
          pending += b.length;
        } else {
          const out = drain(c);
          if (out.length !== pending) return false;
          taken.push(out);
          pending = 0;
        }
        if (c.full !== pending >= chunkSize) return false;
      }
      taken.push(drain(c));
      return Buffer.concat(taken).equals(Buffer.concat(pushed)) && !c.full;
    }),
    { numRuns: 1000 },
  );
  t.pass('1000 runs');
});

t.test(
  'property: JSON.stringify text pushed through JsonChunker parses back to the string, lone surrogates included',
  async (t) => {
    fc.assert(
      fc.property(fc.array(anyString, { maxLength: 6 }), fc.integer({ min: 1, max: 32 }), (a, size) => {
        const c = new JsonChunker(size);
        const parts: Buffer[] = [];
        c.push('[');
        a.forEach((s, i) => {
          if (i > 0) c.push(',');
          c.push(JSON.stringify(s));
          if (c.full) parts.push(drain(c));
        });
        c.push(']');
        parts.push(drain(c));
        const back = JSON.parse(Buffer.concat(parts).toString('utf8')) as string[];
        return back.length === a.length && back.every((x, i) => x === a[i]);
      }),
      { numRuns: 1000 },
    );
    t.pass('1000 runs');
  },
);

// ---------------------------------------------------------------------------------------------
// Document encoder: opening + documents + closing parse to the object built by hand (D2).
// Rows are built from stored values with rowFromValues, as the cursor returns them (query.ts).

const nullish = (s: string | null) => (s === null || s === '' ? null : s);
const orDefault = (s: string | null, def: string) => (s === null || s === '' ? def : s);

/**
 * A string as PostgreSQL text can hold it: valid UTF-8 only, so a lone surrogate becomes U+FFFD.
 * Applied before computing both the row and the expected object.
 */
const utf8 = (s: string) => Buffer.from(s, 'utf8').toString('utf8');

/** Stored values normalised as PostgreSQL would store them (see utf8). */
function stored(v: DocumentValues): DocumentValues {
  return v.map((x) => (x === null ? null : Array.isArray(x) ? x.map(utf8) : utf8(x))) as DocumentValues;
}

/** The book object by hand: table 2.1 order, D2.1 empty-to-null, D3.6 coverImage as stored. */
function expectedBook(b: BookRow) {
  return {
    id: b.id,
    slug: b.slug,
    name: b.name,
    description: nullish(b.description),
    coverImage: nullish(b.cover_image),
    createdAt: b.created_at,
    updatedAt: b.updated_at,
  };
}

/** One document by hand: table 2.2 order with the D2 rules; D3 rewriting for cover.url and contentHtml. */
function expectedDocument(v: DocumentValues) {
  const [
    id,
    slug,
    name,
    type,
    parentId,
    orderKey,
    description,
    emojiInfo,
    coverUrl,
    coverPosition,
    tags,
    themeId,
    backgroundThemeId,
    bodyFontSize,
    createdAt,
    updatedAt,
    contentStr,
    contentHtml,
  ] = v;
  return {
    id,
    slug,
    name,
    type,
    parentId: nullish(parentId),
    orderKey,
    description: nullish(description),
    emojiInfo: nullish(emojiInfo),
    cover:
      coverUrl === null || coverUrl === ''
        ? null
        : { url: rewriteMediaUrl(coverUrl, PREFIX), position: orDefault(coverPosition, 'center') },
    tags: tags === null || tags.length === 0 ? null : tags,
    themeId: orDefault(themeId, 'default'),
    backgroundThemeId: orDefault(backgroundThemeId, 'transparent'),
    bodyFontSize: orDefault(bodyFontSize, 'default'),
    createdAt,
    updatedAt,
    contentStr: nullish(contentStr),
    contentHtml: contentHtml === null || contentHtml === '' ? null : rewriteHtml(contentHtml, PREFIX),
  };
}

const BOOK_KEYS = ['id', 'slug', 'name', 'description', 'coverImage', 'createdAt', 'updatedAt'];
const DOC_KEYS = [
  'id',
  'slug',
  'name',
  'type',
  'parentId',
  'orderKey',
  'description',
  'emojiInfo',
  'cover',
  'tags',
  'themeId',
  'backgroundThemeId',
  'bodyFontSize',
  'createdAt',
  'updatedAt',
  'contentStr',
  'contentHtml',
];

const COMMA = Buffer.from(',');

/** Builds the full body exactly as export-pipeline.ts does: commas between documents, all in one chunker. */
function encodeAll(book: BookRow, rows: DocumentRow[]): Buffer {
  const c = new JsonChunker(Number.MAX_SAFE_INTEGER);
  c.push(encodeOpening(book));
  rows.forEach((r, i) => {
    if (i > 0) c.push(COMMA);
    encodeStaged(r, PREFIX, c);
  });
  c.push(encodeClosing(rows.length));
  return drain(c);
}

const parseBody = (b: Buffer) => JSON.parse(b.toString('utf8')) as Record<string, unknown>;

const optString = fc.oneof(fc.constant(null), fc.constant(''), anyString);
const timestamp = fc
  .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
  .map((d) => d.toISOString());
const bookArb: fc.Arbitrary<BookRow> = fc.record({
  id: anyString,
  slug: anyString,
  name: anyString,
  description: optString,
  cover_image: optString,
  created_at: timestamp,
  updated_at: timestamp,
  export_version: fc.uuid(),
});
const htmlArb = fc.oneof(
  optString,
  fc.constantFrom(
    '<p>x</p><img src="a.png">',
    '<img src="./a\u2028.png" alt="\u0000\ud800">',
    '<script>var s = "</script>";</script>',
    '<a href="f.pdf" download>"\\</a>',
    '<img alt="no src">\n\t"\\',
    '<IMG\nSRC=a.png>',
    '<a href=x>link</a>',
  ),
  fc.tuple(anyString, anyString).map(([a, b]) => `<p>${a}</p><img src="${b.replace(/"/g, '')}">`),
);
/** Stored values of one document; `stored` makes them what PostgreSQL text can hold. */
const valuesArb: fc.Arbitrary<DocumentValues> = fc
  .tuple(
    anyString, // id
    anyString, // slug
    anyString, // name
    fc.oneof(fc.constantFrom('document', 'category'), anyString), // type
    optString, // parentId
    anyString, // orderKey
    optString, // description
    optString, // emojiInfo
    fc.oneof(
      optString,
      fc.constantFrom('covers/1.jpg', 'https://x.example/c.png', '/media/c.png', 'data:image/png;base64,AA'),
    ), // coverUrl
    optString, // coverPosition
    fc.oneof(fc.constant(null), fc.array(anyString, { maxLength: 4 })), // tags
    optString, // themeId
    optString, // backgroundThemeId
    fc.constantFrom(null, 'default', '14', '12'), // bodyFontSize (the database refuses others, D2.3)
    timestamp,
    timestamp,
    optString, // contentStr
    htmlArb, // contentHtml
  )
  .map(stored);

t.test(
  'rowFromValues: the fields around the cover as JSON text with the D2 rules, coverUrl as stored, the id read back',
  async (t) => {
    const v = stored([
      'd"1',
      's',
      'n',
      'document',
      null,
      'a0',
      '',
      null,
      'covers/"c".jpg',
      null,
      ['x', ''],
      null,
      null,
      null,
      '2024-03-01T10:00:00.000Z',
      '2024-03-02T10:00:00.000Z',
      'a\nb',
      '<p>\ud800</p>',
    ]);
    const r = rowFromValues(v);
    t.equal(r.length, 6);
    t.equal(
      r[DOC.head].toString(),
      '{"id":"d\\"1","slug":"s","name":"n","type":"document","parentId":null,"orderKey":"a0","description":null,"emojiInfo":null,"cover":',
      "'' and NULL are null (D2.1)",
    );
    t.strictSame(r[DOC.coverUrl], Buffer.from('covers/"c".jpg'), 'coverUrl is not JSON');
    t.strictSame(r[DOC.coverPosition], Buffer.from('"center"'), 'the position defaults (D2.4)');
    t.equal(
      r[DOC.tail]!.toString(),
      ',"tags":["x",""],"themeId":"default","backgroundThemeId":"transparent","bodyFontSize":"default"' +
        ',"createdAt":"2024-03-01T10:00:00.000Z","updatedAt":"2024-03-02T10:00:00.000Z","contentStr":"a\\nb","contentHtml":',
      'defaults (D2.2, D2.3)',
    );
    t.strictSame(r[DOC.contentHtml], Buffer.from('"<p>\ufffd</p>"'), 'a lone surrogate is stored as U+FFFD');
    t.equal(documentIdOf(r), 'd"1', "the id, read back from the head's JSON");
    t.equal(r[DOC.plan], null, 'no stored plan');

    for (const cover of [null, '']) {
      const bare = rowFromValues(stored(v.map((x, i) => (i === FIELD.coverUrl ? cover : x)) as typeof v));
      t.equal(
        bare[DOC.head].toString(),
        `${r[DOC.head]}null${r[DOC.tail]}`,
        `cover_url ${JSON.stringify(cover)}: the head runs through the tail, the cover null (D2.1)`,
      );
      t.same(
        [bare[DOC.coverUrl], bare[DOC.coverPosition], bare[DOC.tail]],
        [null, null, null],
        'no cover, position or tail of its own',
      );
      t.strictSame([bare[DOC.contentHtml], bare[DOC.plan]], [r[DOC.contentHtml], null]);
      t.equal(documentIdOf(bare), 'd"1', 'the id read back from a head that runs through the tail');
    }
    for (const html of [null, '']) {
      const empty = rowFromValues(stored(v.map((x, i) => (i === FIELD.contentHtml ? html : x)) as typeof v));
      t.same(
        [empty[DOC.contentHtml], empty[DOC.plan]],
        [null, null],
        `contentHtml ${JSON.stringify(html)}: nothing to plan`,
      );
    }
  },
);

t.test('encodeOpening/encodeDocument/encodeClosing: fixed adversarial document (D2)', async (t) => {
  const book: BookRow = {
    id: 'b"1\\',
    slug: '</script>',
    name: '\u2028\u2029',
    description: '',
    cover_image: null,
    created_at: '2024-03-01T10:00:00.000Z',
    updated_at: '2024-03-02T10:00:00.000Z',
    export_version: '00000000-0000-4000-8000-000000000000',
  };
  const v1 = stored([
    'd\u0000',
    'slug\ud800',
    CONTROLS.join(''),
    'document',
    '',
    'a0\u007f',
    '',
    null,
    '',
    'top',
    [],
    '',
    null,
    null,
    '2024-03-01T10:00:00.000Z',
    '2024-03-02T10:00:00.000Z',
    '',
    '',
  ]);
  const v2 = stored([
    'd2',
    's',
    '😀',
    'category',
    'd\u0000',
    'a1',
    'desc "q"',
    '{"icon":"📘"}',
    'covers/c.jpg',
    null,
    ['\\', '"', '\udc00'],
    'serif',
    'paper',
    '14',
    '2024-03-01T10:00:00.000Z',
    '2024-03-02T10:00:00.000Z',
    'text\n\ttab',
    '<img src="a.png"><p>\u2028</p>',
  ]);
  const body = encodeAll(book, [rowFromValues(v1), rowFromValues(v2)]);
  const parsed = parseBody(body);
  const expected = {
    success: true,
    book: expectedBook(book),
    documents: [expectedDocument(v1), expectedDocument(v2)],
    meta: { count: 2 },
  };
  t.same(parsed, expected);
  t.strictSame(Object.keys(parsed), ['success', 'book', 'documents', 'meta'], 'top-level key order (D2.5)');
  t.strictSame(Object.keys(parsed.book as object), BOOK_KEYS, 'book key order (D2.5)');
  const docs = parsed.documents as Record<string, unknown>[];
  t.strictSame(Object.keys(docs[0]!), DOC_KEYS, 'document key order (D2.5)');
  t.strictSame(Object.keys(docs[1]!), DOC_KEYS, 'document key order (D2.5)');
  t.equal(docs[0]!.slug, 'slug\ufffd', 'a lone surrogate arrives as stored text can hold it');
  t.equal(docs[0]!.name, CONTROLS.join(''), 'control characters survive');
  t.equal(docs[0]!.parentId, null, "'' is null (D2.1)");
  t.equal(docs[0]!.description, null, "'' is null (D2.1)");
  t.equal(docs[0]!.tags, null, 'empty tags are null (D2.1)');
  t.equal(docs[0]!.cover, null, "'' cover url is null (D2.4)");
  t.equal(docs[0]!.themeId, 'default', 'D2.2');
  t.equal(docs[0]!.backgroundThemeId, 'transparent', 'D2.2');
  t.equal(docs[0]!.bodyFontSize, 'default', 'D2.3');
  t.equal(docs[0]!.contentStr, null, "'' is null (D2.1)");
  t.equal(docs[0]!.contentHtml, null, "'' is null (D2.1)");
  t.same(docs[1]!.cover, { url: '/media/covers/c.jpg', position: 'center' }, 'D2.4 + D3.6');
  t.strictSame(docs[1]!.tags, ['\\', '"', '\ufffd']);
  t.equal(docs[1]!.emojiInfo, '{"icon":"📘"}', 'emojiInfo stays a string');
  t.equal(docs[1]!.contentHtml, '<img src="/media/a.png"><p>\u2028</p>', 'D3 rewriting survives encoding');
  t.ok(body.toString('utf8').endsWith('],"meta":{"count":2}}'), 'meta.count is last (D2.5)');
  t.equal(JSON.stringify(parsed), JSON.stringify(expected), 'values and key order');
  t.equal(body.toString('utf8'), JSON.stringify(expected), 'byte-identical to JSON.stringify of the expected object');
});

t.test('empty export: opening + closing parses with no documents', async (t) => {
  const book: BookRow = {
    id: 'b',
    slug: 'kb',
    name: 'KB',
    description: 'd',
    cover_image: 'covers/x.png',
    created_at: '2024-03-01T10:00:00.000Z',
    updated_at: '2024-03-01T10:00:00.000Z',
    export_version: '7d1f0c52-3b9e-4c1a-9f2e-5a6b7c8d9e0f',
  };
  const parsed = parseBody(encodeAll(book, []));
  t.same(parsed, {
    success: true,
    book: { ...expectedBook(book), coverImage: 'covers/x.png' },
    documents: [],
    meta: { count: 0 },
  });
});

t.test(
  'property: opening + documents + closing parses to the hand-built object, keys in table order (D2)',
  async (t) => {
    fc.assert(
      fc.property(bookArb, fc.array(valuesArb, { maxLength: 5 }), (book, values) => {
        const body = encodeAll(book, values.map(rowFromValues));
        const text = body.toString('utf8');
        // The body is valid UTF-8: decoding and encoding again gives the same bytes.
        if (!Buffer.from(text, 'utf8').equals(body)) return false;
        const parsed = JSON.parse(text) as { book: object; documents: object[] };
        const expected = {
          success: true,
          book: expectedBook(book),
          documents: values.map(expectedDocument),
          meta: { count: values.length },
        };
        // JSON.stringify comparison checks values and key order at once.
        if (JSON.stringify(parsed) !== JSON.stringify(expected)) return false;
        if (Object.keys(parsed).join() !== 'success,book,documents,meta') return false;
        if (Object.keys(parsed.book).join() !== BOOK_KEYS.join()) return false;
        return parsed.documents.every((d) => Object.keys(d).join() === DOC_KEYS.join());
      }),
      { numRuns: 500 },
    );
    t.pass('500 runs');
  },
);

t.test('property: the encoded body split into arbitrary chunks through JsonChunker is the same bytes', async (t) => {
  fc.assert(
    fc.property(
      bookArb,
      fc.array(valuesArb, { maxLength: 4 }),
      fc.integer({ min: 1, max: 200 }),
      (book, values, size) => {
        const rows = values.map(rowFromValues);
        const c = new JsonChunker(size);
        const parts: Buffer[] = [];
        let short = false;
        c.push(encodeOpening(book));
        rows.forEach((r, i) => {
          if (i > 0) c.push(COMMA);
          encodeStaged(r, PREFIX, c);
          if (c.full) {
            const chunk = drain(c);
            // A chunk taken when full holds at least chunkSize bytes.
            if (chunk.length < size) short = true;
            parts.push(chunk);
          }
        });
        c.push(encodeClosing(rows.length));
        parts.push(drain(c));
        return !short && Buffer.concat(parts).equals(encodeAll(book, rows));
      },
    ),
    { numRuns: 300 },
  );
  t.pass('300 runs');
});
