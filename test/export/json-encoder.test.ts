/**
 * The hand-written JSON encoder (src/export/json-encoder.ts) and the document encoder built on it
 * (src/export/document-encoder.ts) against JSON.stringify/JSON.parse, on adversarial strings:
 * quotes, backslashes, every control character, U+007F, U+2028/2029, lone and paired surrogates,
 * astral characters and `</script>`. Fixed cases plus fast-check properties.
 */
import t from 'tap';
import fc from 'fast-check';
import { JsonChunker, jsonString, jsonStringArray } from '../../src/export/json-encoder.js';
import { encodeClosing, encodeDocument, encodeOpening } from '../../src/export/document-encoder.js';
import { rewriteHtml } from '../../src/export/html-rewriter.js';
import { rewriteMediaUrl } from '../../src/export/media-url.js';
import type { BookRow, DocumentRow } from '../../src/export/query.js';

const PREFIX = '/media/';

const CONTROLS = Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(i));
/** An ASCII-only label for a string: TAP output must not carry raw U+2028 or control characters. */
const label = (s: string) => JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

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
  fc.constantFrom(...CONTROLS, '"', '\\', '/', '\u007f', '\u2028', '\u2029', '\ud800', '\udfff', '\ud83d\ude80', '<', '>', '&'),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
const nastyString = fc.string({ unit: nastyChar });
const anyString = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), codeUnitString, nastyString);

t.test('jsonString: fixed adversarial strings round-trip and match JSON.stringify', async (t) => {
  for (const s of ADVERSARIAL) {
    const enc = jsonString(s);
    t.equal(JSON.parse(enc), s, `round-trip ${label(s)}`);
    t.equal(enc, JSON.stringify(s), `same text as JSON.stringify for ${label(s)}`);
  }
  t.equal(jsonString(null), 'null');
  t.equal(JSON.parse(jsonString(null)), null);
});

t.test('jsonString escapes what JSON requires and leaves no raw control character or lone surrogate', async (t) => {
  for (const c of CONTROLS) {
    const enc = jsonString(c);
    t.notOk(/[\u0000-\u001f]/.test(enc), `U+${c.charCodeAt(0).toString(16).padStart(4, '0')} is escaped`);
  }
  // Lone surrogates must be written as \uXXXX escapes, so the output is valid UTF-8 once encoded.
  t.equal(jsonString('\ud800'), '"\\ud800"');
  t.equal(jsonString('\udfff'), '"\\udfff"');
  t.equal(jsonString('\ud83d\ude80'), '"\ud83d\ude80"', 'a paired surrogate stays literal');
  t.equal(Buffer.from(jsonString('a\ud800b'), 'utf8').toString('utf8'), jsonString('a\ud800b'), 'UTF-8 round-trip is lossless');
  t.equal(jsonString('"'), '"\\""');
  t.equal(jsonString('\\'), '"\\\\"');
  // </script> needs no escaping in JSON: it must come back unchanged.
  t.equal(JSON.parse(jsonString('</script>')), '</script>');
});

t.test('property: JSON.parse(jsonString(s)) === s for arbitrary strings', async (t) => {
  fc.assert(
    fc.property(anyString, (s) => {
      const enc = jsonString(s);
      return JSON.parse(enc) === s && enc === JSON.stringify(s) && Buffer.from(enc, 'utf8').toString('utf8') === enc;
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 runs');
});

t.test('jsonStringArray: fixed cases', async (t) => {
  t.equal(jsonStringArray(null), 'null');
  t.equal(jsonStringArray([]), '[]');
  t.same(JSON.parse(jsonStringArray(ADVERSARIAL)), ADVERSARIAL);
  t.equal(jsonStringArray(ADVERSARIAL), JSON.stringify(ADVERSARIAL));
  t.same(JSON.parse(jsonStringArray(['a,b', '"],["', ''])), ['a,b', '"],["', '']);
});

t.test('property: jsonStringArray round-trips arbitrary arrays of strings', async (t) => {
  fc.assert(
    fc.property(fc.array(anyString, { maxLength: 8 }), (a) => {
      const enc = jsonStringArray(a);
      const back = JSON.parse(enc) as unknown;
      return enc === JSON.stringify(a) && Array.isArray(back) && back.length === a.length && back.every((x, i) => x === a[i]);
    }),
    { numRuns: 1000 },
  );
  t.pass('1000 runs');
});

t.test('JsonChunker: fixed behaviour of full, size and take', async (t) => {
  const c = new JsonChunker(4);
  t.equal(c.chunkSize, 4);
  t.equal(c.take(), '', 'take on empty gives ""');
  t.notOk(c.full);
  c.push('ab');
  t.equal(c.size, 2);
  t.notOk(c.full, '2 < 4');
  c.push('c');
  t.notOk(c.full, '3 < 4');
  c.push('d');
  t.ok(c.full, 'full at exactly chunkSize');
  c.push('efg');
  t.ok(c.full, 'still full beyond chunkSize');
  t.equal(c.take(), 'abcdefg');
  t.equal(c.size, 0);
  t.notOk(c.full, 'not full after take');
  t.equal(c.take(), '');
  t.equal(new JsonChunker().chunkSize, 64 * 1024, 'default chunk size');
  // Size is counted in UTF-16 code units.
  const d = new JsonChunker(2);
  d.push('😀');
  t.ok(d.full, 'one astral character is two code units');
});

t.test('property: JsonChunker pushes and takes at arbitrary points concatenate to the pushed text', async (t) => {
  const op = fc.oneof(
    fc.record({ push: anyString }),
    fc.constant({ take: true as const }),
  );
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 64 }), fc.array(op, { maxLength: 40 }), (chunkSize, ops) => {
      const c = new JsonChunker(chunkSize);
      let pushed = '';
      let taken = '';
      let pending = 0;
      for (const o of ops) {
        if ('push' in o) {
          c.push(o.push);
          pushed += o.push;
          pending += o.push.length;
        } else {
          taken += c.take();
          pending = 0;
        }
        if (c.size !== pending) return false;
        if (c.full !== pending >= chunkSize) return false;
      }
      taken += c.take();
      return taken === pushed && c.size === 0 && !c.full;
    }),
    { numRuns: 1000 },
  );
  t.pass('1000 runs');
});

// ---------------------------------------------------------------------------------------------
// Document encoder: opening + documents + closing parse to the object built by hand (D2).

const nullish = (s: string | null) => (s === null || s === '' ? null : s);
const orDefault = (s: string | null, def: string) => (s === null || s === '' ? def : s);

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
function expectedDocument(r: DocumentRow) {
  const [id, slug, name, type, parentId, orderKey, description, emojiInfo, coverUrl, coverPosition, tags, themeId,
    backgroundThemeId, bodyFontSize, createdAt, updatedAt, contentStr, contentHtml] = r;
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
const DOC_KEYS = ['id', 'slug', 'name', 'type', 'parentId', 'orderKey', 'description', 'emojiInfo', 'cover', 'tags',
  'themeId', 'backgroundThemeId', 'bodyFontSize', 'createdAt', 'updatedAt', 'contentStr', 'contentHtml'];

/** Builds the full body exactly as export-stream.ts does: commas between documents. */
function encodeAll(book: BookRow, rows: DocumentRow[]): string {
  let out = encodeOpening(book);
  rows.forEach((r, i) => {
    out += (i === 0 ? '' : ',') + encodeDocument(r, PREFIX);
  });
  return out + encodeClosing(rows.length);
}

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
});
const htmlArb = fc.oneof(
  optString,
  fc.constantFrom(
    '<p>x</p><img src="a.png">',
    '<img src="./a\u2028.png" alt="\u0000\ud800">',
    '<script>var s = "</script>";</script>',
    '<a href="f.pdf" download>"\\</a>',
  ),
  fc.tuple(anyString, anyString).map(([a, b]) => `<p>${a}</p><img src="${b.replace(/"/g, '')}">`),
);
const docArb: fc.Arbitrary<DocumentRow> = fc.tuple(
  anyString, // id
  anyString, // slug
  anyString, // name
  fc.oneof(fc.constantFrom('document', 'category'), anyString), // type
  optString, // parentId
  anyString, // orderKey
  optString, // description
  optString, // emojiInfo
  fc.oneof(optString, fc.constantFrom('covers/1.jpg', 'https://x.example/c.png', '/media/c.png', 'data:image/png;base64,AA')), // coverUrl
  optString, // coverPosition
  fc.oneof(fc.constant(null), fc.array(anyString, { maxLength: 4 })), // tags
  optString, // themeId
  optString, // backgroundThemeId
  fc.constantFrom(null, 'default', '14', '12'), // bodyFontSize (the database refuses others, D2.3)
  timestamp,
  timestamp,
  optString, // contentStr
  htmlArb, // contentHtml
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
  };
  const row: DocumentRow = [
    'd\u0000', 'slug\ud800', CONTROLS.join(''), 'document', '', 'a0\u007f', '', null, '', 'top', [], '', null, null,
    '2024-03-01T10:00:00.000Z', '2024-03-02T10:00:00.000Z', '', '',
  ];
  const row2: DocumentRow = [
    'd2', 's', '😀', 'category', 'd\u0000', 'a1', 'desc "q"', '{"icon":"📘"}', 'covers/c.jpg', null, ['\\', '"', '\udc00'],
    'serif', 'paper', '14', '2024-03-01T10:00:00.000Z', '2024-03-02T10:00:00.000Z', 'text\n\ttab', '<img src="a.png"><p>\u2028</p>',
  ];
  const body = encodeAll(book, [row, row2]);
  const parsed = JSON.parse(body) as Record<string, unknown>;
  t.same(parsed, {
    success: true,
    book: expectedBook(book),
    documents: [expectedDocument(row), expectedDocument(row2)],
    meta: { count: 2 },
  });
  t.strictSame(Object.keys(parsed), ['success', 'book', 'documents', 'meta'], 'top-level key order (D2.5)');
  t.strictSame(Object.keys(parsed.book as object), BOOK_KEYS, 'book key order (D2.5)');
  const docs = parsed.documents as Record<string, unknown>[];
  t.strictSame(Object.keys(docs[0]!), DOC_KEYS, 'document key order (D2.5)');
  t.equal(docs[0]!.description, null, "'' is null (D2.1)");
  t.equal(docs[0]!.tags, null, 'empty tags are null (D2.1)');
  t.equal(docs[0]!.cover, null, "'' cover url is null (D2.4)");
  t.equal(docs[0]!.themeId, 'default', 'D2.2');
  t.equal(docs[0]!.backgroundThemeId, 'transparent', 'D2.2');
  t.equal(docs[0]!.bodyFontSize, 'default', 'D2.3');
  t.same(docs[1]!.cover, { url: '/media/covers/c.jpg', position: 'center' }, 'D2.4 + D3.6');
  t.equal(docs[1]!.contentHtml, '<img src="/media/a.png"><p>\u2028</p>', 'D3 rewriting survives encoding');
  t.ok(body.endsWith('],"meta":{"count":2}}'), 'meta.count is last (D2.5)');
  t.equal(JSON.stringify(parsed), JSON.stringify({ success: true, book: expectedBook(book), documents: [expectedDocument(row), expectedDocument(row2)], meta: { count: 2 } }));
});

t.test('empty export: opening + closing parses with no documents', async (t) => {
  const book: BookRow = {
    id: 'b', slug: 'kb', name: 'KB', description: 'd', cover_image: 'covers/x.png',
    created_at: '2024-03-01T10:00:00.000Z', updated_at: '2024-03-01T10:00:00.000Z',
  };
  const parsed = JSON.parse(encodeAll(book, []));
  t.same(parsed, { success: true, book: { ...expectedBook(book), coverImage: 'covers/x.png' }, documents: [], meta: { count: 0 } });
});

t.test('property: opening + documents + closing parses to the hand-built object, keys in table order (D2)', async (t) => {
  fc.assert(
    fc.property(bookArb, fc.array(docArb, { maxLength: 5 }), (book, rows) => {
      const text = encodeAll(book, rows);
      const parsed = JSON.parse(text) as { book: object; documents: object[] };
      const expected = { success: true, book: expectedBook(book), documents: rows.map(expectedDocument), meta: { count: rows.length } };
      // JSON.stringify comparison checks values and key order at once.
      if (JSON.stringify(parsed) !== JSON.stringify(expected)) return false;
      if (Object.keys(parsed).join() !== 'success,book,documents,meta') return false;
      if (Object.keys(parsed.book).join() !== BOOK_KEYS.join()) return false;
      return parsed.documents.every((d) => Object.keys(d).join() === DOC_KEYS.join());
    }),
    { numRuns: 500 },
  );
  t.pass('500 runs');
});

t.test('property: the encoded body split into arbitrary chunks through JsonChunker is the same text', async (t) => {
  fc.assert(
    fc.property(bookArb, fc.array(docArb, { maxLength: 4 }), fc.integer({ min: 1, max: 200 }), (book, rows, size) => {
      const c = new JsonChunker(size);
      const parts: string[] = [];
      c.push(encodeOpening(book));
      rows.forEach((r, i) => {
        c.push(i === 0 ? '' : ',');
        c.push(encodeDocument(r, PREFIX));
        if (c.full) parts.push(c.take());
      });
      c.push(encodeClosing(rows.length));
      parts.push(c.take());
      return parts.join('') === encodeAll(book, rows);
    }),
    { numRuns: 300 },
  );
  t.pass('300 runs');
});
