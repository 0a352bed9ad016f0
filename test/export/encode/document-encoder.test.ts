/**
 * What src/export/encode/document-encoder.ts adds now that document columns arrive as JSON text
 * (query.ts `to_json`, fetched raw): the contentHtml pre-check on escaped JSON text
 * (as contentHtmlAsStored runs it, which must have no false negatives), contentHtml bytes passed through
 * untouched when nothing is rewritten, and rowFromValues, the stand-in every encoder test and the
 * encoder benchmark build rows with, checked against the rows PostgreSQL itself returns.
 */
import { DOC, documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';
import t from 'tap';
import { encodeStaged } from '../../helpers/plans.js';
import fc from 'fast-check';
import { jsonHtmlMayNeedRewrite } from '../../../src/export/rewrite/rewriter/html-rewriter.js';
import { mayNeedRewrite, rewriteHtml } from '../../../src/export/rewrite/rewriter/html-rewriter.js';
import { JsonChunker } from '../../../src/export/encode/json-encoder.js';
import { documentQuery } from '../../../src/export/snapshot/query.js';
import { FIELD, rowFromValues, type DocumentValues } from '../../../bench/lib/rows.js';
import { createTestDatabase } from '../../helpers/db.js';

const PREFIX = '/media/';

/**
 * Whether escaped JSON text `json` is flagged by the pre-check: contentHtmlAsStored leaves it to
 * the tokenizer. It answers `""` before the pre-check, which would not flag `""` either (no `<`),
 * so for every text this is exactly the pre-check.
 */
const preCheck = (json: Buffer) => jsonHtmlMayNeedRewrite(json);

/** Whether escaped JSON of `html`, as to_json (or JSON.stringify) writes it, passes the pre-check. */
const jsonCheck = (html: string) => preCheck(Buffer.from(JSON.stringify(html)));

/** An ASCII-only label for a string: TAP output must not carry raw control characters. */
const label = (s: string) =>
  JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

// ---------------------------------------------------------------------------------------------
// The contentHtml pre-check on escaped JSON text

t.test('contentHtml pre-check: fixed cases', async (t) => {
  const yes = [
    '<img\nsrc=a>', // the newline is `\n` in JSON
    '<img\tsrc=a>',
    '<img\rsrc=a>',
    '<img\fsrc=a>',
    '<img src=a>',
    '<img/src=a>',
    '<img>',
    '<img', // at the very end: `<img"` in JSON
    'text <IMG',
    '<iMaGe src=a>',
    '<source srcset=a>',
    '<video poster=p>',
    '<audio src=a>',
    '<track src=t>',
    '<embed src=e>',
    '<object data=d>',
    '<a href=x download>',
    '<A HREF=x DOWNLOAD>',
    '<a href=x data-type="attachment">',
    '<a\nhref=x download>',
    '<p>download</p><a href=x>', // download anywhere makes links count
    '<a download',
    'naïve 日本 😀 <img src=a>',
    '<img"', // the quote is escaped as \" in JSON: a false positive, which is allowed
    '<img\u0001', // likewise \u0001
  ];
  const no = [
    '',
    'plain text',
    'naïve café 日本語 😀 \u2028 \\ " \n\t',
    '<p>hello</p>',
    '<a href=x>link</a>',
    '<a href="https://example.com/a.png">a.png</a>',
    '<A HREF=x.pdf>',
    '<abbr>download</abbr>', // download, but no `<a` tag
    '<imgx src=a>',
    '<i>img</i>',
    '< img src=a>',
    '&lt;img src=a&gt;',
    '<my-img src=a>',
    '<area href=x download>',
    '<videos>',
    '<img\u00e9', // a non-ASCII letter continues the tag name
    '<img\u2028src=a>', // U+2028 is no HTML white space, and JSON keeps it raw
    '<a', // a link counts only with download or data-type
  ];
  for (const s of yes) t.ok(jsonCheck(s), `true for ${label(s)}`);
  for (const s of no) t.notOk(jsonCheck(s), `false for ${label(s)}`);
  t.ok(preCheck(Buffer.from('"<img\\nsrc=a>"')), 'escaped newline after the tag name, written by hand');
  t.ok(preCheck(Buffer.from('"<img\\u000csrc=a>"')), 'a \\u escape after the tag name');
  t.notOk(preCheck(Buffer.from('"<a href=x>"')), 'a link without markers');
});

/** Pieces of HTML-ish text: media tag names, markers, everything that can end a tag name, and noise. */
const PIECES = [
  '<img',
  '<IMG',
  '<iMg',
  '<image',
  '<IMAGE',
  '<source',
  '<SOURCE',
  '<video',
  '<Video',
  '<audio',
  '<track',
  '<embed',
  '<object',
  '<a',
  '<A',
  '<abbr',
  '<area',
  '<p',
  '<imgx',
  '<svg>',
  '</svg>',
  '<math>',
  '<script>',
  '</script>',
  '<textarea>',
  '<!--',
  '-->',
  '<![CDATA[',
  '<',
  '</',
  '</a>',
  'download',
  'DOWNLOAD',
  'Download',
  'data-type',
  'DATA-TYPE',
  'data-type="attachment"',
  'data-type=attachment',
  ' ',
  '\t',
  '\n',
  '\r',
  '\f',
  '\r\n',
  '\v',
  '/',
  '>',
  '"',
  "'",
  '\\',
  '\\"',
  '=',
  'src=',
  'href=',
  'srcset=',
  'poster=',
  'data=',
  'a.png',
  './a.png',
  '/a.png',
  'https://x/a.png',
  '/media/a.png',
  '&amp;',
  '&lt;',
  '&#x3c;',
  '&#47;',
  'é',
  'ß',
  'İ',
  'ſ',
  '\u212a',
  'µ',
  'ÿ',
  '日本',
  '😀',
  '\u2028',
  '\u2029',
  '\u0000',
  '\u0001',
  '\u007f',
  '\u0085',
  '\u00a0',
  '\ufeff',
  '\ufffd',
];
/** A media tag or link, often one the rewriter changes: name in any case, a terminator, attributes. */
const TAG_NAMES = ['img', 'image', 'source', 'video', 'audio', 'track', 'embed', 'object', 'a'];
const mediaTag = fc
  .tuple(
    fc.constantFrom(...TAG_NAMES),
    fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
    fc.constantFrom(' ', '\t', '\n', '\r', '\f', '/', '>', '\r\n', '  '),
    fc.array(
      fc.constantFrom(
        'src=a.png',
        'src="./a b.png"',
        "srcset='a.png 1x, b.png 2x'",
        'poster=p.png',
        'data=d.pdf',
        'href=f.pdf',
        'download',
        'DownLoad',
        'data-type=attachment',
        'DATA-TYPE="attachment"',
        'SRC=/x.png',
        'src=https://x/a.png',
        'alt="<img src=a>"',
      ),
      { maxLength: 3 },
    ),
    fc.constantFrom('>', '/>', '', ' >'),
  )
  .map(
    ([name, upper, term, attrs, end]) =>
      '<' +
      [...name].map((c, i) => (upper[i % 6] ? c.toUpperCase() : c)).join('') +
      (term === '>' ? '' : term) +
      attrs.join(' ') +
      end,
  );
const htmlish = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .array(fc.oneof(fc.constantFrom(...PIECES), fc.string({ unit: 'binary', maxLength: 3 })), { maxLength: 24 })
      .map((a) => a.join('')),
  },
  {
    weight: 3,
    arbitrary: fc.array(fc.oneof(mediaTag, fc.constantFrom(...PIECES)), { maxLength: 12 }).map((a) => a.join('')),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  {
    weight: 1,
    arbitrary: fc.string({
      unit: fc.constantFrom('<', 'i', 'm', 'g', 'a', ' ', '\n', '>', '/', '"', '\\', 'd', 'o', 'w', 'n', 'l'),
      maxLength: 30,
    }),
  },
);

t.test('property: the contentHtml pre-check has no false negatives on HTML-ish text', async (t) => {
  let flagged = 0;
  let rewritten = 0;
  let passed = 0;
  fc.assert(
    fc.property(htmlish, (html) => {
      const pre = mayNeedRewrite(html);
      const changed = rewriteHtml(html, PREFIX) !== html;
      const ours = jsonCheck(html);
      if (pre) flagged++;
      if (changed) rewritten++;
      if (!ours) passed++;
      return ours || (!pre && !changed);
    }),
    { numRuns: 5000 },
  );
  // The draws must exercise both sides, or the property proves little.
  t.ok(flagged > 500, `mayNeedRewrite true for ${flagged} of 5000 draws`);
  t.ok(rewritten > 100, `rewriteHtml changed ${rewritten} of 5000 draws`);
  t.ok(passed > 500, `the pre-check passed ${passed} of 5000 draws without the rewriter`);
});

t.test(
  'property: the contentHtml pre-check is at least as strict as mayNeedRewrite on arbitrary strings',
  async (t) => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' })), (s) => {
        const html = Buffer.from(s).toString(); // what PostgreSQL text can hold
        return !mayNeedRewrite(html) || jsonCheck(html);
      }),
      { numRuns: 2000 },
    );
    t.pass('2000 runs');
  },
);

// ---------------------------------------------------------------------------------------------
// contentHtml through encodeDocument

/** Stored values of one document with the given contentHtml (and nothing else of interest). */
function withHtml(html: string | null): DocumentValues {
  return [
    'd',
    's',
    'n',
    'document',
    null,
    'a0',
    null,
    null,
    null,
    null,
    null,
    null,
    null,
    null,
    '2024-03-01T10:00:00.000Z',
    '2024-03-02T10:00:00.000Z',
    null,
    html,
  ];
}

const CONTENT_HTML_KEY = Buffer.from(',"contentHtml":');

/** The bytes encodeDocument writes for contentHtml: the last field, between its key and `}`. */
function contentHtmlBytes(row: DocumentRow): Buffer {
  const c = new JsonChunker();
  encodeStaged(row, PREFIX, c);
  const out = Buffer.concat(c.takeChunks());
  const at = out.lastIndexOf(CONTENT_HTML_KEY);
  if (at === -1 || out[out.length - 1] !== 0x7d) throw new Error('no contentHtml field at the end');
  return out.subarray(at + CONTENT_HTML_KEY.length, out.length - 1);
}

t.test('encodeDocument passes contentHtml bytes through untouched when nothing is rewritten', async (t) => {
  const untouched = [
    '<p>plain</p>',
    '<a href="x.pdf">not an attachment</a>',
    '<img alt="no src">', // passes the pre-check, nothing to rewrite
    '<img src="https://cdn.example/a.png">', // absolute: kept (D3.2)
    '<img src="/media/a.png">', // already under the prefix
    '<script>"<img src=a.png>"</script>',
    'naïve 日本 😀 \u2028\u2029 \u007f "q" \\ \n\r\t\f\b\u0001',
  ];
  for (const html of untouched) {
    t.equal(rewriteHtml(html, PREFIX), html, `nothing to rewrite in ${label(html)}`);
    const row = rowFromValues(withHtml(html));
    t.ok(contentHtmlBytes(row).equals(row[DOC.contentHtml]!), `same bytes for ${label(html)}`);
  }
  // JSON text in a form JSON.stringify would not write (`\u00e9`, `\/`) stays exactly as the database sent it.
  for (const json of [
    '"caf\\u00e9 <img alt=x>"',
    '"<p>a\\/b<\\/p>"',
    '"<a href=\\"https://x.example/f.pdf\\" download>\\u2028</a>"',
  ]) {
    const row = rowFromValues(withHtml('x'));
    row[DOC.contentHtml] = Buffer.from(json);
    t.ok(contentHtmlBytes(row).equals(Buffer.from(json)), `same bytes for ${json}`);
  }
  t.equal(contentHtmlBytes(rowFromValues(withHtml(null))).toString(), 'null', 'NULL is null');
  t.equal(contentHtmlBytes(rowFromValues(withHtml(''))).toString(), 'null', "'' is null (D2.1)");
  // When the rewriter changes something, the text is escaped again.
  const rewritten = contentHtmlBytes(rowFromValues(withHtml('<img\nsrc="a.png" alt="\u2028">')));
  t.equal(rewritten.toString(), JSON.stringify('<img\nsrc="/media/a.png" alt="\u2028">'));
});

t.test(
  'property: contentHtml is the stored JSON when not rewritten, JSON of the rewritten HTML otherwise',
  async (t) => {
    fc.assert(
      fc.property(htmlish, (s) => {
        const html = Buffer.from(s).toString();
        if (html === '') return true;
        const row = rowFromValues(withHtml(html));
        const got = contentHtmlBytes(row);
        const after = rewriteHtml(html, PREFIX);
        return after === html ? got.equals(row[DOC.contentHtml]!) : got.equals(Buffer.from(JSON.stringify(after)));
      }),
      { numRuns: 2000 },
    );
    t.pass('2000 runs');
  },
);

// ---------------------------------------------------------------------------------------------
// rowFromValues against PostgreSQL: the rows the cursor's query returns, fetched raw.

/** Strings PostgreSQL text can hold: valid UTF-8, no NUL. */
const pgString = fc
  .oneof(
    fc.string({ unit: 'binary' }),
    fc.string({
      unit: fc.constantFrom(
        '"',
        '\\',
        '/',
        '\n',
        '\r',
        '\t',
        '\b',
        '\f',
        '\u0001',
        '\u001f',
        '\u007f',
        '\u2028',
        '\u2029',
        '😀',
        'é',
        '<',
        '>',
        '&',
        "'",
        ',',
        '{',
        '}',
        ' ',
        'a',
      ),
    }),
  )
  .map((s) =>
    Buffer.from(s)
      .toString()
      .replace(/\u0000/g, ''),
  );
const optPg = fc.oneof(fc.constant(null), fc.constant(''), pgString);
const timestamp = fc
  .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
  .map((d) => d.toISOString());
const pgValues: fc.Arbitrary<DocumentValues> = fc.tuple(
  pgString,
  pgString,
  pgString,
  fc.constantFrom('document', 'category'),
  optPg,
  pgString,
  optPg,
  optPg,
  optPg,
  optPg,
  fc.oneof(fc.constant(null), fc.array(pgString, { maxLength: 4 })),
  optPg,
  optPg,
  fc.constantFrom(null, 'default', '14', '12'),
  timestamp,
  timestamp,
  optPg,
  fc.oneof(optPg, fc.constantFrom('<img src="a.png">', '<a href=f.pdf download>"\\\n</a>')),
);

t.test('rowFromValues gives the bytes PostgreSQL returns for the cursor query', async (t) => {
  const db = await createTestDatabase(t);
  const sql = db.sql;
  await sql`INSERT INTO users (id, name) VALUES ('u', 'u')`;
  const html = documentQuery({ excludeCategories: false, includeContentHtml: true });
  const noHtml = documentQuery({ excludeCategories: false, includeContentHtml: false });
  const withPlans = documentQuery({ excludeCategories: false, includeContentHtml: true, withPlans: true });
  let run = 0;
  let compared = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(pgValues, { minLength: 1, maxLength: 6 }), async (drawn) => {
      const book = `b${run++}`;
      // Ids are unique per table; order keys decide the cursor order.
      const values = drawn.map((v, i) => {
        const w = [...v] as DocumentValues;
        w[FIELD.id] = `${book}/${i}/${v[FIELD.id]}`;
        w[FIELD.orderKey] = `${String(i).padStart(3, '0')}${v[FIELD.orderKey]}`;
        return w;
      });
      await sql`INSERT INTO books (id, owner_id, slug, name) VALUES (${book}, 'u', ${book}, ${book})`;
      const docs = values.map((v) => ({
        id: v[FIELD.id],
        slug: v[FIELD.slug],
        name: v[FIELD.name],
        type: v[FIELD.type],
        parent_id: v[FIELD.parentId],
        order_key: v[FIELD.orderKey],
        description: v[FIELD.description],
        emoji_info: v[FIELD.emojiInfo],
        cover_url: v[FIELD.coverUrl],
        cover_position: v[FIELD.coverPosition],
        tags: v[FIELD.tags],
        theme_id: v[FIELD.themeId],
        background_theme_id: v[FIELD.backgroundThemeId],
        body_font_size: v[FIELD.bodyFontSize],
        created_at: v[FIELD.createdAt],
        updated_at: v[FIELD.updatedAt],
        content_str: v[FIELD.contentStr],
        content_html: v[FIELD.contentHtml],
      }));
      await sql.unsafe(
        `INSERT INTO documents (id, book_id, slug, name, type, parent_id, order_key, status, description, emoji_info,
           cover_url, cover_position, tags, theme_id, background_theme_id, body_font_size, created_at, updated_at,
           content_str, content_html)
         SELECT id, $1, slug, name, type, parent_id, order_key, 1, description, emoji_info, cover_url, cover_position,
           tags, theme_id, background_theme_id, body_font_size, created_at, updated_at, content_str, content_html
         FROM json_to_recordset($2::text::json) AS x(id text, slug text, name text, type text, parent_id text, order_key text,
           description text, emoji_info text, cover_url text, cover_position text, tags text[], theme_id text,
           background_theme_id text, body_font_size text, created_at timestamptz, updated_at timestamptz,
           content_str text, content_html text)`,
        [book, JSON.stringify(docs)],
      );
      // A plan stored for the first document: read with its row only where contentHtml is exported.
      const planned = Buffer.concat([Buffer.alloc(32, run), Buffer.from([0, 1, 0x7f, 0x80, 0xff])]);
      await sql`INSERT INTO rewrite_plans (document_id, plan_key, plan) VALUES (${values[0]![FIELD.id]}, ${planned.subarray(0, 32)}, ${planned.subarray(32)})`;
      const got = (await sql.unsafe(html, [book]).raw()) as unknown as DocumentRow[];
      const gotNoHtml = (await sql.unsafe(noHtml, [book]).raw()) as unknown as DocumentRow[];
      const gotPlans = (await sql.unsafe(withPlans, [book]).raw()) as unknown as DocumentRow[];
      if (got.length !== values.length || gotNoHtml.length !== values.length || gotPlans.length !== values.length)
        return false;
      for (let i = 0; i < values.length; i++) {
        const want = rowFromValues(values[i]!);
        const row = got[i]!;
        for (let k = 0; k < want.length; k++) {
          const a = want[k] as Buffer | null;
          const b = row[k] as Buffer | null;
          if (a === null ? b !== null : b === null || !a.equals(b)) {
            throw new Error(
              `column ${k} of ${label(values[i]![FIELD.id])}: expected ${a === null ? 'null' : label(a.toString())}, got ${b === null ? 'null' : label(b.toString())}`,
            );
          }
        }
        // Without contentHtml there is nothing to plan: no plan either, one object fewer per row.
        if (gotNoHtml[i]![DOC.contentHtml] !== null || gotNoHtml[i]![DOC.plan] !== null) return false;
        if (documentIdOf(row) !== values[i]![FIELD.id])
          throw new Error(`the id read back from ${label(row[DOC.head].toString())}`);
        const plan = gotPlans[i]![DOC.plan];
        const wantPlan = i === 0 && row[DOC.contentHtml] !== null ? Buffer.from(`\\x${planned.toString('hex')}`) : null;
        if (wantPlan === null ? plan !== null : plan === null || !plan.equals(wantPlan)) {
          throw new Error(
            `stored plan of ${label(values[i]![FIELD.id])}: expected ${String(wantPlan)}, got ${String(plan)}`,
          );
        }
        if (
          gotPlans[i]!.some(
            (col, k) => k !== DOC.plan && (col === null ? row[k] !== null : !col.equals(row[k] as Buffer)),
          )
        )
          return false;
        // And the documents the encoder writes from either row are the same bytes.
        const ours = new JsonChunker();
        const theirs = new JsonChunker();
        encodeStaged(row, PREFIX, ours);
        encodeStaged(want, PREFIX, theirs);
        if (!Buffer.concat(ours.takeChunks()).equals(Buffer.concat(theirs.takeChunks()))) return false;
        compared++;
      }
      return true;
    }),
    { numRuns: 60 },
  );
  t.ok(compared >= 60, `${compared} documents compared column by column`);
});
