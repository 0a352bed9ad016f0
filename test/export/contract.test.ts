/**
 * The export's response body over HTTP, against the contract: export-api.md sections 2, 3 and 4.1
 * and decisions.md D1 (ordering), D2 (empty and default values), D3 (media proxy rewriting, through
 * HTTP only: the rewriter's unit cases live in html-rewriter.test.ts / media-url.test.ts), D4 (query
 * parameters) and D7.2 (editor formats never returned).
 *
 * One server per file serves the read-only tests; tests that need other settings start their own.
 */
import t from 'tap';
import { createHash } from 'node:crypto';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { call, type Res } from '../helpers/http.js';

const PREFIX_ENV = 'https://media.example/proxy//'; // normalised to exactly one trailing '/' (D3.1)
const PREFIX = 'https://media.example/proxy/';

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
const BOOK_KEYS = ['id', 'slug', 'name', 'description', 'coverImage', 'createdAt', 'updatedAt'];
const ISO_UTC_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const YJS_MARKER = 'YJS-SECRET-7f3a1c';
const YJS_B64 = Buffer.from(YJS_MARKER).toString('base64');
const JSON_MARKER = 'JSON-SECRET-9b2c44';

/** GET with `Bearer <key>` (no header when `key` is null). */
function get(base: string, path: string, key: string | null = 'kbx_u1'): Promise<Res> {
  return call(base, path, { auth: key === null ? null : `Bearer ${key}` });
}

const exp = (slug: string, qs = '') => `/api/v1/open/books/${encodeURIComponent(slug)}/docs${qs}`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = any;
const byId = (docs: Doc[], id: string): Doc => docs.find((d) => d.id === id);

const FULL_HTML =
  '<p>Hello</p><img src="./uploads/a.png" alt="A">' +
  '<a href="other-doc">other</a>' +
  '<a download href="/files/report.pdf">report</a>' +
  '<img src="https://cdn.example/x.png">';

function book(id: string, ownerId: string, slug: string, documents: unknown[], extra: Record<string, unknown> = {}) {
  return {
    id,
    ownerId,
    slug,
    name: `Book ${slug}`,
    createdAt: '2024-03-01T10:00:00.000Z',
    updatedAt: '2024-03-02T10:00:00.000Z',
    ...extra,
    documents,
  };
}

const SEED = {
  users: [
    { id: 'u1', name: 'u1', apiKeys: [{ id: 'k-u1', key: 'kbx_u1' }] },
    { id: 'u2', name: 'u2', apiKeys: [{ id: 'k-u2', key: 'kbx_u2' }] },
  ],
  books: [
    book(
      'b-main',
      'u1',
      'kb',
      [
        doc('m-full', 'a0', {
          slug: 'full-doc',
          name: 'Full "doc"',
          description: 'Summary',
          emojiInfo: '{"icon":"📘"}',
          cover: { url: '/uploads/cover.png', position: 'top' },
          tags: ['alpha', 'beta'],
          themeId: 'serif',
          backgroundThemeId: 'paper',
          bodyFontSize: '14',
          createdAt: '2024-03-01T12:30:45.123+02:00',
          updatedAt: '2024-06-30T23:59:59-05:00',
          contentStr: 'Plain text body',
          contentHtml: FULL_HTML,
          contentYjs: YJS_B64,
          contentJson: { type: 'doc', marker: JSON_MARKER },
        }),
        doc('m-empty', 'a1', {
          parentId: 'm-full',
          description: '',
          emojiInfo: '',
          cover: { url: '', position: 'left' },
          tags: [],
          themeId: '',
          backgroundThemeId: '',
          bodyFontSize: '',
          contentStr: '',
          contentHtml: '',
        }),
        doc('m-null', 'a2', {
          description: null,
          emojiInfo: null,
          cover: null,
          tags: null,
          themeId: null,
          backgroundThemeId: null,
          bodyFontSize: null,
          contentStr: null,
          contentHtml: null,
        }),
        doc('m-cover-nopos', 'a3', { cover: { url: 'img/c.png' }, bodyFontSize: '12' }),
        doc('m-cover-emptypos', 'a4', { cover: { url: './img/d.png', position: '' }, bodyFontSize: 'default' }),
        doc('m-cover-abs', 'a5', { cover: { url: 'https://cdn.example/c.png', position: '10% 20%' } }),
        doc('m-cover-nourl', 'a6', { cover: { url: null, position: 'top' } }),
        doc('m-cover-data', 'a7', { cover: { url: 'data:image/png;base64,AAAA' } }),
        doc('m-folder', 'a8', { type: 'category', contentHtml: '<p>folder</p>', contentStr: 'folder text' }),
      ],
      {
        description: 'A knowledge base',
        coverImage: '/uploads/book.png',
        createdAt: '2024-03-01T12:30:45.123+02:00',
        updatedAt: '2024-03-02T10:00:00Z',
      },
    ),
    book('b-emptyfields', 'u1', 'empty-fields', [], { description: '', coverImage: '' }),
    book('b-nullfields', 'u1', 'null-fields', [], { description: null, coverImage: null }),
    book('b-nodocs', 'u1', 'nodocs', []),
    book('b-onlyhidden', 'u1', 'only-hidden', [
      doc('h-cat', 'a0', { type: 'category' }),
      doc('h-inactive', 'a1', { status: 0 }),
    ]),
    book('b-types', 'u1', 'types', [
      doc('t-doc', 'a0'),
      doc('t-cat', 'a1', { type: 'category', contentHtml: '<img src="f.png">' }),
      doc('t-board', 'a2', { type: 'board' }),
      doc('t-sheet', 'a3', { type: 'sheet' }),
      doc('t-Cat', 'a4', { type: 'Category' }),
      doc('t-s0', 'a5', { status: 0 }),
      doc('t-s2', 'a6', { status: 2 }),
      doc('t-sneg', 'a7', { status: -1 }),
      doc('t-cat-inactive', 'a8', { type: 'category', status: 0 }),
      doc('t-html', 'a9', { contentHtml: '<p>x</p>', contentStr: 'x' }),
    ]),
    book('b-order', 'u1', 'order', [
      // Keys chosen so that byte-wise (C), locale and UTF-16 orders all differ.
      ...['b', 'a1', 'Zz', 'a0', 'A', '0', '~', 'é', 'ü', 'z', 'ﬀ', '😀', 'a', '_', 'aa', 'Z'].map((k, i) =>
        doc(`o-${String(i).padStart(2, '0')}`, k, { name: `key ${k}` }),
      ),
    ]),
    book('b-ties', 'u1', 'ties', [
      doc('a', 'k'),
      doc('B', 'k'),
      doc('_', 'k'),
      doc('Z', 'k'),
      doc('b', 'j'),
      doc('é', 'k'),
      doc('A0', 'l'),
    ]),
    book('b-flat', 'u1', 'flat', [
      doc('f-p', 'b'),
      doc('f-c1', 'a', { parentId: 'f-p' }),
      doc('f-q', 'c'),
      doc('f-c2', 'd', { parentId: 'f-p' }),
      doc('f-gc', 'A', { parentId: 'f-c2' }),
    ]),
    book('b-escape', 'u1', 'escape', [
      doc('e-1', 'a0', {
        name: 'Quote " backslash \\ tab \t newline \n',
        contentStr: 'ctl \u0001\u001f del \u007f ls \u2028 ps \u2029 </script> emoji 😀 ü',
        tags: ['with "quote"', 'back\\slash', '日本'],
        description: '\u00e9\u0301',
      }),
    ]),
    book('b-u2', 'u2', 'u2-book', [doc('u2-doc', 'a0')]),
    book('b-html', 'u1', 'html', [
      doc('x-1', 'a0', {
        contentHtml:
          '<IMG SRC=\'pics/a.png\' ALT="x"  data-src="raw.png">' +
          '<img srcset="a.png 1x, /b.png 2x, https://c.example/c.png 3x">' +
          '<video src="v.mp4" poster="/p.jpg"></video><audio src="s.mp3"></audio>' +
          '<object data="o.swf"></object><embed src="e.swf"><source src="s.webm">' +
          '<a data-type="attachment" href="files/att.zip">att</a>' +
          '<link href="style.css"><div data-src="d.png" style="background:url(bg.png)">&amp; &lt;img src="esc.png"&gt;</div>' +
          '<!-- <img src="comment.png"> --><script>var s = \'<img src="script.png">\';</script>' +
          `<img src="${PREFIX}already.png"><img src="//proto.example/x.png"><img src="#frag">`,
      }),
    ]),
  ],
};

let srv: TestServer;
t.before(async () => {
  srv = await startServer(t, { MEDIA_PROXY_PREFIX: PREFIX_ENV });
  await seed(srv.db.sql, SEED);
});

t.test(
  'export-api.md 2.3 / D2.5: top-level keys are exactly success, book, documents, meta in that order (raw text)',
  async (t) => {
    const r = await get(srv.url, exp('kb'));
    t.equal(r.status, 200);
    t.ok(r.text.startsWith('{"success":true,"book":{"id":'), 'body opens with success then book');
    t.ok(r.text.includes('},"documents":[{'), 'documents follows book');
    t.match(r.text, /\],"meta":\{"count":\d+\}\}$/, 'meta is the last key, count the last thing');
    t.same(Object.keys(r.json), ['success', 'book', 'documents', 'meta']);
    t.equal(r.json.success, true);
    t.same(Object.keys(r.json.meta), ['count']);
    t.ok(r.text.indexOf('"success"') < r.text.indexOf('"book"'));
    t.ok(r.text.lastIndexOf('"documents"') < r.text.lastIndexOf('"meta"'));
  },
);

t.test(
  'export-api.md 2.1 / D2.5: book has exactly the fields of table 2.1, in order, with stored values',
  async (t) => {
    const r = await get(srv.url, exp('kb'));
    t.same(Object.keys(r.json.book), BOOK_KEYS);
    const raw = r.text.slice(r.text.indexOf('"book":{'), r.text.indexOf('},"documents"'));
    let last = -1;
    for (const k of BOOK_KEYS) {
      const at = raw.indexOf(`"${k}":`);
      t.ok(at > last, `book.${k} comes after the previous field in the raw text`);
      last = at;
    }
    t.same(r.json.book, {
      id: 'b-main',
      slug: 'kb',
      name: 'Book kb',
      description: 'A knowledge base',
      coverImage: '/uploads/book.png',
      createdAt: '2024-03-01T10:30:45.123Z',
      updatedAt: '2024-03-02T10:00:00.000Z',
    });
  },
);

t.test(
  'export-api.md 2.2 rule 3 / D2.5: every document has exactly the 17 keys of table 2.2, in table order',
  async (t) => {
    for (const qs of ['', '?excludeCategories=false', '?excludeCategories=false&includeContentHtml=false']) {
      for (const slug of ['kb', 'types', 'order', 'escape', 'html']) {
        const r = await get(srv.url, exp(slug, qs));
        t.equal(r.status, 200);
        t.ok(r.json.documents.length > 0);
        for (const d of r.json.documents) t.same(Object.keys(d), DOC_KEYS, `${slug}${qs} ${d.id}`);
      }
    }
    // Raw order too (JSON.parse keeps insertion order, but check the text itself once).
    const r = await get(srv.url, exp('kb'));
    const rest = r.text.slice(r.text.indexOf('"documents":[{') + 13);
    const first = rest.slice(0, rest.indexOf('},{"id":') + 1);
    const keysInText = [...first.matchAll(/"([A-Za-z]+)":/g)].map((m) => m[1]);
    t.same(
      keysInText.filter((k) => DOC_KEYS.includes(k!)),
      DOC_KEYS,
    );
  },
);

t.test('export-api.md 4.1 rule 4 / D2.5: meta.count equals documents.length and is the last key', async (t) => {
  for (const [slug, qs] of [
    ['kb', ''],
    ['kb', '?excludeCategories=false'],
    ['types', ''],
    ['types', '?excludeCategories=false'],
    ['order', ''],
    ['nodocs', ''],
    ['only-hidden', ''],
  ] as const) {
    const r = await get(srv.url, exp(slug, qs));
    t.equal(r.json.meta.count, r.json.documents.length, `${slug}${qs}`);
    t.ok(r.text.endsWith(`],"meta":{"count":${r.json.documents.length}}}`), `${slug}${qs}: count is last`);
  }
});

t.test('export-api.md 4.1 rule 4: an empty knowledge base gives documents [] and meta.count 0', async (t) => {
  const r = await get(srv.url, exp('nodocs'));
  t.equal(r.status, 200);
  t.same(r.json.documents, []);
  t.same(r.json.meta, { count: 0 });
  t.ok(r.text.endsWith('"documents":[],"meta":{"count":0}}'));
  t.equal(r.json.book.id, 'b-nodocs');
  // Only folders and inactive documents: nothing exported by default either.
  const h = await get(srv.url, exp('only-hidden'));
  t.same(h.json.documents, []);
  t.equal(h.json.meta.count, 0);
});

t.test('export-api.md 2.2: every field of a fully populated document, as stored', async (t) => {
  const r = await get(srv.url, exp('kb'));
  const d = byId(r.json.documents, 'm-full');
  t.same(d, {
    id: 'm-full',
    slug: 'full-doc',
    name: 'Full "doc"',
    type: 'document',
    parentId: null,
    orderKey: 'a0',
    description: 'Summary',
    emojiInfo: '{"icon":"📘"}',
    cover: { url: `${PREFIX}uploads/cover.png`, position: 'top' },
    tags: ['alpha', 'beta'],
    themeId: 'serif',
    backgroundThemeId: 'paper',
    bodyFontSize: '14',
    createdAt: '2024-03-01T10:30:45.123Z',
    updatedAt: '2024-07-01T04:59:59.000Z',
    contentStr: 'Plain text body',
    contentHtml:
      `<p>Hello</p><img src="${PREFIX}uploads/a.png" alt="A">` +
      '<a href="other-doc">other</a>' +
      `<a download href="${PREFIX}files/report.pdf">report</a>` +
      '<img src="https://cdn.example/x.png">',
  });
  t.equal(byId(r.json.documents, 'm-empty').parentId, 'm-full', 'parentId carries the parent id');
});

t.test(
  'D2.1: NULL and empty-string nullable fields are null (description, emojiInfo, contentStr, contentHtml)',
  async (t) => {
    const r = await get(srv.url, exp('kb'));
    for (const id of ['m-empty', 'm-null']) {
      const d = byId(r.json.documents, id);
      t.equal(d.description, null, `${id} description`);
      t.equal(d.emojiInfo, null, `${id} emojiInfo`);
      t.equal(d.contentStr, null, `${id} contentStr`);
      t.equal(d.contentHtml, null, `${id} contentHtml`);
    }
    t.equal(byId(r.json.documents, 'm-null').parentId, null);
  },
);

t.test('D2.1: book.description and book.coverImage are null when empty string or NULL', async (t) => {
  for (const slug of ['empty-fields', 'null-fields']) {
    const r = await get(srv.url, exp(slug));
    t.equal(r.status, 200);
    t.equal(r.json.book.description, null, `${slug} description`);
    t.equal(r.json.book.coverImage, null, `${slug} coverImage`);
    t.same(Object.keys(r.json.book), BOOK_KEYS, 'null fields are present, not dropped');
  }
});

t.test('D2.1: tags that are an empty array or NULL are null; others are arrays of strings', async (t) => {
  const r = await get(srv.url, exp('kb'));
  t.equal(byId(r.json.documents, 'm-empty').tags, null, 'empty array');
  t.equal(byId(r.json.documents, 'm-null').tags, null, 'NULL');
  t.same(byId(r.json.documents, 'm-full').tags, ['alpha', 'beta']);
});

t.test('D2.2: themeId "default" and backgroundThemeId "transparent" when NULL or empty', async (t) => {
  const r = await get(srv.url, exp('kb'));
  for (const id of ['m-empty', 'm-null', 'm-cover-abs']) {
    const d = byId(r.json.documents, id);
    t.equal(d.themeId, 'default', `${id} themeId`);
    t.equal(d.backgroundThemeId, 'transparent', `${id} backgroundThemeId`);
  }
  t.equal(byId(r.json.documents, 'm-full').themeId, 'serif');
  t.equal(byId(r.json.documents, 'm-full').backgroundThemeId, 'paper');
});

t.test('D2.3: bodyFontSize is always one of the strings "default", "14", "12"; unset is "default"', async (t) => {
  const r = await get(srv.url, exp('kb', '?excludeCategories=false'));
  for (const d of r.json.documents)
    t.ok(['default', '14', '12'].includes(d.bodyFontSize), `${d.id}: ${d.bodyFontSize}`);
  t.equal(byId(r.json.documents, 'm-full').bodyFontSize, '14');
  t.equal(byId(r.json.documents, 'm-cover-nopos').bodyFontSize, '12');
  t.equal(byId(r.json.documents, 'm-cover-emptypos').bodyFontSize, 'default');
  t.equal(byId(r.json.documents, 'm-empty').bodyFontSize, 'default', 'empty');
  t.equal(byId(r.json.documents, 'm-null').bodyFontSize, 'default', 'NULL');
  t.ok(r.text.includes('"bodyFontSize":"14"'), 'a string in the JSON text, not a number');
  await t.rejects(
    srv.db.sql`UPDATE documents SET body_font_size = '16' WHERE id = 'm-null'`,
    'the database refuses any other value',
  );
});

t.test(
  'D2.4: cover is null without a URL (NULL cover, NULL url, empty url); position "center" when unset',
  async (t) => {
    const r = await get(srv.url, exp('kb'));
    t.equal(byId(r.json.documents, 'm-null').cover, null, 'no cover');
    t.equal(byId(r.json.documents, 'm-empty').cover, null, 'empty-string url');
    t.equal(byId(r.json.documents, 'm-cover-nourl').cover, null, 'NULL url with a position');
    t.same(
      byId(r.json.documents, 'm-cover-nopos').cover,
      { url: `${PREFIX}img/c.png`, position: 'center' },
      'NULL position',
    );
    t.same(
      byId(r.json.documents, 'm-cover-emptypos').cover,
      { url: `${PREFIX}img/d.png`, position: 'center' },
      'empty position',
    );
    t.same(byId(r.json.documents, 'm-cover-abs').cover, { url: 'https://cdn.example/c.png', position: '10% 20%' });
    t.same(Object.keys(byId(r.json.documents, 'm-full').cover), ['url', 'position']);
  },
);

t.test('D2.6: timestamps are ISO 8601 UTC with milliseconds; offsets are converted', async (t) => {
  const r = await get(srv.url, exp('kb', '?excludeCategories=false'));
  t.match(r.json.book.createdAt, ISO_UTC_MS);
  t.match(r.json.book.updatedAt, ISO_UTC_MS);
  for (const d of r.json.documents) {
    t.match(d.createdAt, ISO_UTC_MS, `${d.id} createdAt`);
    t.match(d.updatedAt, ISO_UTC_MS, `${d.id} updatedAt`);
  }
  const full = byId(r.json.documents, 'm-full');
  t.equal(full.createdAt, '2024-03-01T10:30:45.123Z', '+02:00 converted to UTC, milliseconds kept');
  t.equal(full.updatedAt, '2024-07-01T04:59:59.000Z', '-05:00 across midnight and a month end, .000 added');
  t.equal(r.json.book.createdAt, '2024-03-01T10:30:45.123Z');
});

t.test('D2.6: timestamps stay UTC whatever the database session time zone', async (t) => {
  const s = await startServer(t);
  await s.db.sql.unsafe(`ALTER DATABASE ${s.db.name} SET timezone = 'Pacific/Chatham'`);
  await seed(
    s.db.sql,
    simpleSeed([doc('tz', 'a0', { createdAt: '2024-01-01T00:00:00.5+13:45', updatedAt: '2023-12-31T23:59:59.999Z' })]),
  );
  const r = await get(s.url, exp('kb'));
  t.equal(r.status, 200);
  t.equal(r.json.documents[0].createdAt, '2023-12-31T10:15:00.500Z');
  t.equal(r.json.documents[0].updatedAt, '2023-12-31T23:59:59.999Z');
  t.equal(r.json.book.createdAt, '2024-03-01T10:00:00.000Z');
});

t.test('export-api.md 2.2 rule 2 / D7.2: contentYjs and contentJson never appear anywhere in the body', async (t) => {
  for (const qs of [
    '',
    '?excludeCategories=false',
    '?includeContentHtml=false',
    '?excludeCategories=false&includeContentHtml=false',
  ]) {
    const r = await get(srv.url, exp('kb', qs));
    t.equal(r.status, 200);
    for (const needle of [
      YJS_MARKER,
      YJS_B64,
      JSON_MARKER,
      'contentYjs',
      'contentJson',
      'content_yjs',
      'content_json',
    ]) {
      t.notOk(r.text.includes(needle), `${qs || '(defaults)'}: body does not contain ${needle}`);
    }
  }
  // The values really are stored (so the check above means something).
  const [row] = await srv.db.sql`SELECT content_yjs, content_json FROM documents WHERE id = 'm-full'`;
  t.equal(Buffer.from(row!.content_yjs).toString(), YJS_MARKER);
  t.equal(
    (typeof row!.content_json === 'string' ? JSON.parse(row!.content_json) : row!.content_json).marker,
    JSON_MARKER,
  );
});

t.test(
  'export-api.md 2.2 rule 1 / D3.1 / D3.3: contentHtml media URLs rewritten with the configured MEDIA_PROXY_PREFIX',
  async (t) => {
    const r = await get(srv.url, exp('html'));
    const html: string = r.json.documents[0].contentHtml;
    t.ok(
      html.includes(`<IMG SRC='${PREFIX}pics/a.png' ALT="x"  data-src="raw.png">`),
      'img src rewritten, quotes/case/spacing kept, data-src untouched',
    );
    t.ok(
      html.includes(`<img srcset="${PREFIX}a.png 1x, ${PREFIX}b.png 2x, https://c.example/c.png 3x">`),
      'every relative srcset candidate',
    );
    t.ok(html.includes(`<video src="${PREFIX}v.mp4" poster="${PREFIX}p.jpg"></video>`), 'video src and poster');
    t.ok(html.includes(`<audio src="${PREFIX}s.mp3"></audio>`), 'audio src');
    t.ok(html.includes(`<object data="${PREFIX}o.swf"></object>`), 'object data');
    t.ok(html.includes(`<embed src="${PREFIX}e.swf">`), 'embed src');
    t.ok(html.includes(`<source src="${PREFIX}s.webm">`), 'source src');
    t.ok(html.includes(`<a data-type="attachment" href="${PREFIX}files/att.zip">`), 'attachment link');
    t.ok(html.includes('<link href="style.css">'), 'link href is not media');
    t.ok(
      html.includes('<div data-src="d.png" style="background:url(bg.png)">&amp; &lt;img src="esc.png"&gt;</div>'),
      'unlisted attributes and escaped text untouched',
    );
    t.ok(html.includes('<!-- <img src="comment.png"> -->'), 'comment untouched');
    t.ok(html.includes('<script>var s = \'<img src="script.png">\';</script>'), 'script text untouched');
    t.ok(html.includes(`<img src="${PREFIX}already.png">`), 'already-prefixed URL not rewritten twice');
    t.ok(html.includes('<img src="//proto.example/x.png"><img src="#frag">'), 'protocol-relative and fragment left');
    t.notOk(html.includes(`${PREFIX}${PREFIX}`));
    t.notOk(html.includes('proxy//'), 'exactly one slash after the prefix');
  },
);

t.test('D3.5: everything but rewritten attribute values is returned byte-for-byte as stored', async (t) => {
  const [row] = await srv.db.sql`SELECT content_html FROM documents WHERE id = 'x-1'`;
  const stored: string = row!.content_html;
  const r = await get(srv.url, exp('html'));
  const html: string = r.json.documents[0].contentHtml;
  // Removing every inserted prefix gives back the stored text minus the stripped leading '/' and './'.
  const undo = html.split(PREFIX).join('');
  const storedStripped = stored
    .replace("SRC='pics/a.png'", "SRC='pics/a.png'")
    .replace(', /b.png', ', b.png')
    .replace('poster="/p.jpg"', 'poster="p.jpg"')
    .replace(`src="${PREFIX}already.png"`, 'src="already.png"');
  t.equal(undo, storedStripped);
});

t.test('D3.6: cover.url is rewritten like a media URL; book.coverImage is returned as stored', async (t) => {
  const r = await get(srv.url, exp('kb'));
  t.equal(r.json.book.coverImage, '/uploads/book.png', 'book.coverImage not rewritten');
  t.equal(byId(r.json.documents, 'm-full').cover.url, `${PREFIX}uploads/cover.png`, 'leading / removed');
  t.equal(byId(r.json.documents, 'm-cover-emptypos').cover.url, `${PREFIX}img/d.png`, 'leading ./ removed');
  t.equal(byId(r.json.documents, 'm-cover-abs').cover.url, 'https://cdn.example/c.png', 'absolute left');
  t.equal(byId(r.json.documents, 'm-cover-data').cover.url, 'data:image/png;base64,AAAA', 'data: left');
});

t.test('D3.1: the default prefix is /media/ and an unrewritten configuration uses it', async (t) => {
  const s = await startServer(t);
  await seed(s.db.sql, simpleSeed([doc('p', 'a0', { contentHtml: '<img src="/x.png">', cover: { url: 'c.png' } })]));
  const r = await get(s.url, exp('kb'));
  t.equal(r.json.documents[0].contentHtml, '<img src="/media/x.png">');
  t.equal(r.json.documents[0].cover.url, '/media/c.png');
});

t.test(
  'export-api.md 3 / 4.1 rule 1: only active documents (status 1) are exported; status 0, 2, -1 never',
  async (t) => {
    for (const qs of ['', '?excludeCategories=false', '?excludeCategories=false&includeContentHtml=false']) {
      const r = await get(srv.url, exp('types', qs));
      const ids = r.json.documents.map((d: Doc) => d.id);
      for (const hidden of ['t-s0', 't-s2', 't-sneg', 't-cat-inactive'])
        t.notOk(ids.includes(hidden), `${qs}: ${hidden}`);
      t.ok(r.text.indexOf('t-s0') === -1 && r.text.indexOf('t-sneg') === -1, 'not even mentioned');
    }
  },
);

t.test('D4.3 / export-api.md 4.1: excludeCategories defaults to true and removes only type "category"', async (t) => {
  const r = await get(srv.url, exp('types'));
  t.same(
    r.json.documents.map((d: Doc) => d.id),
    ['t-doc', 't-board', 't-sheet', 't-Cat', 't-html'],
  );
  t.same(
    r.json.documents.map((d: Doc) => d.type),
    ['document', 'board', 'sheet', 'Category', 'document'],
  );
  const e = await get(srv.url, exp('types', '?excludeCategories=true'));
  t.equal(e.text, r.text, 'explicit true is the default');
});

t.test('export-api.md 4.1 (excludeCategories=false): folder nodes are included in place', async (t) => {
  const r = await get(srv.url, exp('types', '?excludeCategories=false'));
  t.same(
    r.json.documents.map((d: Doc) => d.id),
    ['t-doc', 't-cat', 't-board', 't-sheet', 't-Cat', 't-html'],
  );
  t.equal(
    byId(r.json.documents, 't-cat').contentHtml,
    `<img src="${PREFIX}f.png">`,
    'folders carry contentHtml by default',
  );
});

t.test(
  'export-api.md 4.1 rule 5: excludeCategories=false&includeContentHtml=false gives folders and null contentHtml',
  async (t) => {
    const r = await get(srv.url, exp('types', '?excludeCategories=false&includeContentHtml=false'));
    t.equal(r.status, 200);
    t.ok(
      r.json.documents.some((d: Doc) => d.type === 'category'),
      'folder nodes present',
    );
    for (const d of r.json.documents) {
      t.equal(d.contentHtml, null, `${d.id} contentHtml null`);
      t.ok(Object.prototype.hasOwnProperty.call(d, 'contentHtml'), 'still present');
    }
    t.equal(byId(r.json.documents, 't-html').contentStr, 'x', 'contentStr still included');
    // Same for a document whose HTML is non-empty in the main book; cover still rewritten.
    const k = await get(srv.url, exp('kb', '?includeContentHtml=false'));
    const full = byId(k.json.documents, 'm-full');
    t.equal(full.contentHtml, null);
    t.equal(full.contentStr, 'Plain text body');
    t.equal(full.cover.url, `${PREFIX}uploads/cover.png`);
    t.notOk(k.text.includes('<p>Hello</p>'));
    t.notOk(
      k.json.documents.some((d: Doc) => d.type === 'category'),
      'includeContentHtml=false alone keeps excluding folders',
    );
  },
);

t.test(
  'export-api.md 4.1 rule 7: contentStr is included by default and null when there is no plain text',
  async (t) => {
    const r = await get(srv.url, exp('kb'));
    t.equal(byId(r.json.documents, 'm-full').contentStr, 'Plain text body');
    t.equal(byId(r.json.documents, 'm-null').contentStr, null);
    t.equal(byId(r.json.documents, 'm-cover-abs').contentStr, null, 'never set');
  },
);

t.test('D4.1: 1 and 0 are accepted like true and false', async (t) => {
  const pairs: [string, string][] = [
    ['?excludeCategories=1', '?excludeCategories=true'],
    ['?excludeCategories=0', '?excludeCategories=false'],
    ['?includeContentHtml=0', '?includeContentHtml=false'],
    ['?includeContentHtml=1', '?includeContentHtml=true'],
    ['?excludeCategories=0&includeContentHtml=0', '?excludeCategories=false&includeContentHtml=false'],
  ];
  for (const [a, b] of pairs) {
    const ra = await get(srv.url, exp('types', a));
    const rb = await get(srv.url, exp('types', b));
    t.equal(ra.status, 200, a);
    t.equal(ra.text, rb.text, `${a} same as ${b}`);
  }
  const z = await get(srv.url, exp('types', '?excludeCategories=0&includeContentHtml=0'));
  t.ok(z.json.documents.some((d: Doc) => d.type === 'category'));
  t.ok(z.json.documents.every((d: Doc) => d.contentHtml === null));
});

t.test(
  'D4.1: any other value, an empty value or a repeated parameter is 400 INVALID_PARAMETER; nothing exported',
  async (t) => {
    const bad = [
      'excludeCategories=TRUE',
      'excludeCategories=True',
      'excludeCategories=yes',
      'excludeCategories=no',
      'excludeCategories=',
      'excludeCategories',
      'excludeCategories=2',
      'excludeCategories=%20true',
      'excludeCategories=true%20',
      'excludeCategories=true&excludeCategories=true',
      'excludeCategories=true&excludeCategories=false',
      'includeContentHtml=FALSE',
      'includeContentHtml=on',
      'includeContentHtml=',
      'includeContentHtml=0&includeContentHtml=0',
      'includeContentHtml=null',
      'excludeCategories=true&includeContentHtml=maybe',
    ];
    for (const q of bad) {
      const r = await get(srv.url, exp('kb', `?${q}`));
      t.equal(r.status, 400, q);
      t.same(Object.keys(r.json ?? {}), ['success', 'code', 'message'], `${q}: section 7 envelope`);
      t.equal(r.json?.success, false, q);
      t.equal(r.json?.code, 'INVALID_PARAMETER', q);
      t.equal(typeof r.json?.message, 'string');
      t.match(String(r.headers['content-type']), /^application\/json/, q);
      t.notOk(r.text.includes('documents'), `${q}: nothing exported`);
    }
  },
);

t.test('D4.2: unknown query parameters are ignored (names are case-sensitive)', async (t) => {
  const base = await get(srv.url, exp('types'));
  for (const q of [
    '?page=2&limit=1',
    '?foo=bar',
    '?excludecategories=false',
    '?ExcludeCategories=false&INCLUDECONTENTHTML=no',
    '?x=%ZZ',
    '?a[b]=c&_=1',
  ]) {
    const r = await get(srv.url, exp('types', q));
    t.equal(r.status, 200, q);
    t.equal(r.text, base.text, `${q}: same export as without it`);
  }
});

t.test('D1.1: documents are ordered by orderKey byte-wise (COLLATE "C"), e.g. "Zz" < "a0" < "a1" < "b"', async (t) => {
  const r = await get(srv.url, exp('order'));
  const keys: string[] = r.json.documents.map((d: Doc) => d.orderKey);
  const byteWise = [...keys].sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
  t.same(keys, byteWise);
  t.same(keys, ['0', 'A', 'Z', 'Zz', '_', 'a', 'a0', 'a1', 'aa', 'b', 'z', '~', 'é', 'ü', 'ﬀ', '😀']);
  const at = (k: string) => keys.indexOf(k);
  t.ok(at('Zz') < at('a0') && at('a0') < at('a1') && at('a1') < at('b'), 'the decisions.md example');
  t.ok(at('ﬀ') < at('😀'), 'UTF-8 byte order, not UTF-16 code-unit order');
});

t.test('D1.2: ties on orderKey are broken by id COLLATE "C"', async (t) => {
  const r = await get(srv.url, exp('ties'));
  t.same(
    r.json.documents.map((d: Doc) => d.id),
    ['b', 'B', 'Z', '_', 'a', 'é', 'A0'],
  );
  const again = await get(srv.url, exp('ties'));
  t.equal(again.text, r.text, 'repeatable');
});

t.test('D1.3 / export-api.md 4.1 rule 2: the order is flat over the knowledge base, not a tree walk', async (t) => {
  const r = await get(srv.url, exp('flat'));
  t.same(
    r.json.documents.map((d: Doc) => [d.id, d.parentId]),
    [
      ['f-gc', 'f-c2'],
      ['f-c1', 'f-p'],
      ['f-p', null],
      ['f-q', null],
      ['f-c2', 'f-p'],
    ],
  );
});

t.test("export-api.md 4.1: only the requested knowledge base's documents are exported", async (t) => {
  const r = await get(srv.url, exp('flat'));
  t.ok(r.json.documents.every((d: Doc) => d.id.startsWith('f-')));
  const u2 = await get(srv.url, exp('u2-book'), 'kbx_u2');
  t.same(
    u2.json.documents.map((d: Doc) => d.id),
    ['u2-doc'],
  );
});

t.test(
  'export-api.md 2.2 (string fields): quotes, backslashes, control and special characters round-trip as JSON',
  async (t) => {
    const r = await get(srv.url, exp('escape'));
    t.equal(r.status, 200);
    const d = r.json.documents[0];
    t.equal(d.name, 'Quote " backslash \\ tab \t newline \n');
    t.equal(d.contentStr, 'ctl \u0001\u001f del \u007f ls \u2028 ps \u2029 </script> emoji 😀 ü');
    t.same(d.tags, ['with "quote"', 'back\\slash', '日本']);
    t.equal(d.description, '\u00e9\u0301', 'no Unicode normalisation');
    t.notOk(/[\u0000-\u001f]/.test(r.text), 'no raw control characters in the JSON text');
  },
);

t.test(
  'export-api.md 4.1 rule 3: no pagination, all documents in one response across many cursor batches',
  async (t) => {
    const s = await startServer(t, { EXPORT_BATCH_SIZE: '7' });
    const n = 1503;
    const docs = [];
    // Insert in an order unrelated to the key order.
    for (let i = n - 1; i >= 0; i--) docs.push(doc(`d${i}`, `k${createHash('sha1').update(String(i)).digest('hex')}`));
    await seed(s.db.sql, simpleSeed(docs));
    const r = await get(s.url, exp('kb'));
    t.equal(r.status, 200);
    t.equal(r.json.documents.length, n);
    t.equal(r.json.meta.count, n);
    t.equal(new Set(r.json.documents.map((d: Doc) => d.id)).size, n, 'no duplicates across batch boundaries');
    const keys: string[] = r.json.documents.map((d: Doc) => d.orderKey);
    t.same(keys, [...keys].sort(), 'ordered across batch boundaries');
    const paged = await get(s.url, exp('kb', '?page=2&limit=10&offset=5&cursor=abc'));
    t.equal(paged.json.meta.count, n, 'pagination-like parameters are ignored');
  },
);
