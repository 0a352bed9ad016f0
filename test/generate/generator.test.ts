/**
 * The benchmark data generator (src/generate/generator.ts), its COPY loader (bench/lib/load-generated.ts) and
 * its CLI (bench/generate.ts): determinism, the realistic shape, the named sizes (large ≥ 2 GB
 * of export), COPY text escaping, COPY storing exactly what the seed loader stores, the export of
 * a loaded book matching the spec-derived estimate byte for byte, and seed files that
 * `kb-export load` accepts.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { documentsForSize, generatedBook, SIZES } from '../../src/generate/sizes.js';
import { estimateExportBytes, exportedDocument } from '../../bench/lib/expected-export.js';
import { fractionalKey } from '../../src/generate/random.js';
import { generateDocuments } from '../../src/generate/generator.js';
import { apiKeyId, loadGenerated } from '../../bench/lib/load-generated.js';
import { verifyApiKey } from '../../src/auth/api-key.js';
import type { Sql } from '../../src/db/connect.js';
import type { SeedDocument } from '../../src/load/seed-types.js';
import { validateDocument } from '../../src/load/seed-validate.js';
import { SeedWriter } from '../../src/load/seed-writer.js';
import { startServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { untracked } from '../../bench/lib/untracked.js';
import { ROOT } from '../helpers/paths.js';

const GENERATE_CLI = path.join(ROOT, 'dist/bench/generate.js');
const KB_CLI = path.join(ROOT, 'dist/src/cli/kb-export.js');

/** The marker a generated book's description carries (generatorMarker, through generatedBook). */
const generatorMarker = (opts: { documents: number; seed: number }) =>
  generatedBook({ bookId: 'b', bookSlug: 'kb', userId: 'u', ...opts }).description;

const take = (n: number, seed = 42, bookId = 'b') => [...generateDocuments({ bookId, documents: n, seed })];

/** Every stored column of a book's documents, in a comparable form, ordered by id. */
async function storedDocuments(sql: Sql, bookId: string) {
  return sql`
    SELECT id, book_id, slug, name, type, parent_id, order_key, status, description, emoji_info, cover_url,
           cover_position, tags, theme_id, background_theme_id, body_font_size,
           to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS created_at,
           to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS updated_at,
           content_str, content_html, encode(content_yjs, 'hex') AS content_yjs, content_json::text AS content_json
    FROM documents WHERE book_id = ${bookId} ORDER BY id COLLATE "C"`;
}

/** Loads `docs` into a new book of `sql` through the seed loader's writer (the reference). */
async function writeWithSeedWriter(sql: Sql, bookId: string, docs: Iterable<SeedDocument>): Promise<void> {
  await sql.begin(async (tx) => {
    const w = new SeedWriter(tx as never, 7);
    await w.begin();
    await w.addUser({ id: 'u', name: 'U' }, 'user');
    await w.addBook({ id: bookId, ownerId: 'u', slug: 'kb', name: 'KB' }, 'book');
    for (const d of docs) await w.addDocument(bookId, d);
    await w.finish();
  });
}

/**
 * Loads `docs` (made afresh for each load) as book `bookId` of user `u` through loadGenerated's
 * COPY, the generator replaced by `docs` for that book; the book's fingerprint (its description)
 * still hashes generated documents. Documents of other books are the generator's.
 */
async function writeWithCopy(
  t: Test,
  sql: Sql,
  bookId: string,
  docs: () => Iterable<SeedDocument>,
  count = [...docs()].length,
): Promise<void> {
  const { loadGenerated: load } = await t.mockImport<typeof import('../../bench/lib/load-generated.js')>(
    new URL('../../bench/lib/load-generated.js', import.meta.url).href,
    {
      [new URL('../../src/generate/generator.js', import.meta.url).href]: {
        generateDocuments: (opts: Parameters<typeof generateDocuments>[0]) =>
          opts.bookId === bookId ? docs() : generateDocuments(opts),
      },
    },
  );
  await load(sql, {
    documents: count,
    bookId,
    bookSlug: bookId,
    userId: 'u',
    apiKey: 'kbx_copy_test',
    afterLoad: 'none',
  });
}

function run(
  file: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      ...untracked([process.execPath, file, ...args]),
      { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'silent', ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
      },
    );
  });
}

t.before(() => {
  if (!existsSync(GENERATE_CLI)) throw new Error(`${GENERATE_CLI} is missing: run \`npm run build\` first`);
});

t.test('deterministic: the same seed gives the same documents, another seed others, fewer a prefix', async (t) => {
  // A hundred documents span categories, nesting and every body feature: determinism needs no more.
  const a = take(100, 7);
  t.strictSame(take(100, 7), a, 'same seed, same documents, every field');
  t.strictSame(take(40, 7), a.slice(0, 40), 'a shorter run is a prefix of a longer one');
  const b = take(100, 8);
  t.notSame(
    b.map((d) => d.contentHtml),
    a.map((d) => d.contentHtml),
    'another seed, other bodies',
  );
  t.equal(generatorMarker({ documents: 300, seed: 7 }), generatorMarker({ documents: 300, seed: 7 }), 'stable marker');
  t.not(
    generatorMarker({ documents: 300, seed: 7 }),
    generatorMarker({ documents: 300, seed: 8 }),
    'the marker names the seed',
  );
  t.not(generatorMarker({ documents: 300, seed: 7 }), generatorMarker({ documents: 301, seed: 7 }), 'and the count');
});

t.test('fractional-indexing keys sort byte-wise as their numbers do', async (t) => {
  const ns = [0, 1, 61, 62, 63, 62 + 3843, 62 + 3844, 62 + 3844 + 238327, 62 + 3844 + 238328, 10_000_000];
  const keys = ns.map(fractionalKey);
  t.strictSame(keys.slice(0, 7), ['a0', 'a1', 'az', 'b00', 'b01', 'bzz', 'c000']);
  for (let i = 1; i < keys.length; i++)
    t.ok(Buffer.compare(Buffer.from(keys[i - 1]!), Buffer.from(keys[i]!)) < 0, `${keys[i - 1]} < ${keys[i]}`);
  t.throws(() => fractionalKey(-1), RangeError);
});

t.test('realistic shape: tree, order keys, bodies, media, unicode, tags, covers, inactive documents', async (t) => {
  const docs = take(3000, 42);
  const byId = new Map(docs.map((d) => [d.id, d]));
  const seen = new Set<string>();
  let nestedCategory = 0;
  let docUnderDoc = 0;
  let badParent = 0;
  let badKey = 0;
  let invalid = 0;
  for (let i = 0; i < docs.length; i++) {
    const d = docs[i]!;
    const p = d.parentId ? byId.get(d.parentId) : undefined;
    if (d.parentId && (!p || !seen.has(p.id))) badParent++;
    if (d.type === 'category' && p?.type === 'category') nestedCategory++;
    if (p && p.type !== 'category') docUnderDoc++;
    if (i > 0 && !(Buffer.compare(Buffer.from(docs[i - 1]!.orderKey), Buffer.from(d.orderKey)) < 0)) badKey++;
    if (
      !/^(Z[0-9A-Za-z]|[a-z][0-9A-Za-z]+)$/.test(d.orderKey) ||
      (d.orderKey.endsWith('0') && d.orderKey.length > 2 + d.orderKey.charCodeAt(0) - 0x61)
    )
      badKey++;
    try {
      validateDocument(JSON.parse(JSON.stringify(d)), `documents[${i}]`);
    } catch {
      invalid++;
    }
    seen.add(d.id);
  }
  t.equal(badParent, 0, 'every parent comes before its children');
  t.equal(
    badKey,
    0,
    'order keys are fractional-indexing keys, strictly increasing byte-wise in generation (= export) order',
  );
  t.equal(invalid, 0, 'every document is a valid seed record');
  t.equal(new Set(docs.map((d) => d.id)).size, docs.length, 'unique ids');
  t.ok(nestedCategory > 10, `nested categories (${nestedCategory})`);
  t.ok(docUnderDoc > 0, `documents under documents (${docUnderDoc})`);
  const categories = docs.filter((d) => d.type === 'category').length;
  t.ok(categories > 30 && categories < 600, `categories: ${categories}`);
  t.ok(
    docs.some((d) => d.type === 'sheet'),
    'a type other than document and category',
  );

  const inactive = docs.filter((d) => d.status !== 1).length / docs.length;
  t.ok(inactive > 0.03 && inactive < 0.07, `about 5% inactive (${(inactive * 100).toFixed(1)}%)`);

  const bodies = docs.filter((d) => d.type === 'document' && d.contentHtml && d.contentHtml.length > 100);
  const sizes = bodies.map((d) => Buffer.byteLength(d.contentHtml!)).sort((x, y) => x - y);
  const median = sizes[Math.floor(sizes.length / 2)]!;
  t.ok(median > 2_000 && median < 8_000, `median body a few KB (${median} bytes)`);
  t.ok(sizes.filter((s) => s > 20_000).length > bodies.length * 0.05, 'some tens of KB');
  t.ok(sizes[sizes.length - 1]! > 150_000, `some hundreds of KB (largest ${sizes[sizes.length - 1]} bytes)`);
  for (const [what, re] of [
    ['paragraphs', /<p>/],
    ['headings', /<h[2-4] /],
    ['lists', /<(ul|ol)[ >]/],
    ['tables', /<table>/],
    ['code blocks', /<pre><code class="language-/],
    ['links', /<a href="(\.\.\/|https:)/],
    ['escaped text', /&lt;|&amp;/],
  ] as const) {
    t.ok(bodies.filter((d) => re.test(d.contentHtml!)).length > bodies.length * 0.2, `bodies hold ${what}`);
  }
  const withImages = bodies.filter(
    (d) => /<img [^>]*src="(?!https?:)/.test(d.contentHtml!) && /<img [^>]*srcset="/.test(d.contentHtml!),
  ).length;
  t.ok(
    withImages > bodies.length * 0.35 && withImages < bodies.length * 0.65,
    `about half carry relative images with srcset (${withImages} of ${bodies.length})`,
  );
  const withAttachments = bodies.filter((d) => /<a [^>]*(download|data-type="attachment")/.test(d.contentHtml!)).length;
  t.ok(withAttachments > bodies.length * 0.2, `attachments (${withAttachments})`);
  t.ok(
    bodies.every((d) => d.contentStr && !d.contentStr.includes('<p>')),
    'plain-text bodies beside the HTML',
  );
  const text = bodies.map((d) => d.contentStr).join('');
  for (const [what, re] of [
    ['CJK', /[\u3040-\u30ff\u4e00-\u9fff]/],
    ['Cyrillic', /[\u0400-\u04ff]/],
    ['emoji', /\p{Extended_Pictographic}/u],
    ['tabs', /\t/],
    ['backslashes', /\\/],
    ['quotes', /"/],
  ] as const) {
    t.match(text, re, `text holds ${what}`);
  }
  t.ok(docs.filter((d) => d.tags && d.tags.length > 0).length > docs.length * 0.3, 'tags');
  t.ok(
    docs.some((d) => d.tags && d.tags.length === 0),
    'an empty tag list now and then',
  );
  t.ok(docs.filter((d) => d.cover).length > docs.length * 0.05, 'covers');
  t.ok(
    docs.some((d) => d.contentHtml === null && d.type === 'document'),
    'a document without a body',
  );
});

t.test('named sizes (bench/run.ts checks that large exports at least 2e9 bytes, as it generates them)', async (t) => {
  t.equal(SIZES.small, 100);
  t.equal(SIZES.medium, 20_000);
  t.equal(documentsForSize('large'), SIZES.large);
  t.throws(() => documentsForSize('huge'), /unknown size "huge" \(known: small, medium, large\)/);
  t.throws(() => documentsForSize('toString'), RangeError);
  // Estimating all of large generates 2 GB of text (half a minute); a sample of its first 5,000
  // documents, scaled, lands within 5 % of the real body, which bench/run.ts checks in full.
  const sample = estimateExportBytes({
    bookId: 'bench-large',
    bookSlug: 'large',
    userId: 'bench-user',
    documents: 5000,
    rewrite: false,
  });
  const scaled = (sample.bytes / 5000) * SIZES.large;
  t.ok(
    scaled >= 2.06e9 && scaled < 2.4e9,
    `large: about ${Math.round(scaled / 1e6)} MB of export, at least 2e9 bytes with a margin`,
  );
});

t.test('COPY text escaping: values come back as written, NULL only where unset', async (t) => {
  const { sql } = await createTestDatabase(t);
  const doc: SeedDocument = {
    id: 'd\t1',
    slug: 's',
    name: 'n\nm',
    type: 'document',
    orderKey: 'a0',
    status: 1,
    tags: ['x\\y'],
    contentYjs: 'AQI=',
    contentJson: { s: 'a\nb' },
    description: '\\N',
    emojiInfo: '\\.',
    contentStr: 'a\\b\tc\nd\re',
    contentHtml: 'plain ünïcödé 🚀 "q"',
  };
  await writeWithCopy(t, sql, 'bk', () => [doc]);
  const [row] = await sql`
    SELECT id, name, parent_id, tags, description, emoji_info, content_str, content_html,
           encode(content_yjs, 'hex') AS yjs, content_json::text AS json
    FROM documents WHERE book_id = 'bk'`;
  t.equal(row!.id, 'd\t1', 'tabs inside values escaped');
  t.equal(row!.name, 'n\nm');
  t.equal(row!.parent_id, null, 'NULL parent');
  t.strictSame(row!.tags, ['x\\y'], 'array literal escaping, then COPY escaping');
  t.equal(row!.description, '\\N', 'the text \\N is not NULL');
  t.equal(row!.emoji_info, '\\.', 'nor the end-of-data marker');
  t.equal(row!.content_str, 'a\\b\tc\nd\re', 'backslash, tab, newline, carriage return');
  t.equal(row!.content_html, 'plain ünïcödé 🚀 "q"', 'nothing to escape: the same string');
  t.equal(row!.yjs, '0102', 'bytea as hex');
  t.equal(row!.json, '{"s": "a\\nb"}', 'jsonb as JSON text');
  await t.rejects(
    writeWithCopy(t, sql, 'nul', () => [{ ...doc, name: 'nul\0' }]),
    /NUL/,
    'PostgreSQL text cannot hold NUL',
  );
});

/** Hand-made documents at the edges of COPY's text format and of the seed loader's rules. */
function edgeDocuments(): SeedDocument[] {
  const base = {
    type: 'document',
    status: 1,
    createdAt: '2024-03-01T10:00:00.000Z',
    updatedAt: '2024-03-01T10:00:00.123Z',
  };
  return [
    {
      ...base,
      id: 'e-tab\there',
      slug: 'tab',
      name: 'tab\tname',
      orderKey: 'a0',
      contentStr: 'line1\nline2\r\nline3\ttabbed',
      contentHtml: '<p>a\\b</p>\n<pre>\\\\server\\share\t\\n</pre>',
    },
    {
      ...base,
      id: 'e-backslash\\',
      slug: 'b\\s',
      name: '\\N',
      orderKey: 'a1',
      description: '\\.',
      contentStr: '\\',
      contentHtml: '\\\\',
    },
    {
      ...base,
      id: 'e-unicode',
      slug: 'ü',
      name: '日本語 🚀 👨‍👩‍👧 e\u0301 \u00a0\u200b\u2028\u2029',
      orderKey: 'a2',
      contentStr: 'κόσμος мир עולם',
      emojiInfo: '{"icon":"📘"}',
    },
    {
      ...base,
      id: 'e-nulls',
      slug: 'n',
      name: 'nulls',
      orderKey: 'a3',
      parentId: null,
      description: null,
      emojiInfo: null,
      cover: null,
      tags: null,
      themeId: null,
      backgroundThemeId: null,
      bodyFontSize: null,
      contentStr: null,
      contentHtml: null,
      contentYjs: null,
      contentJson: null,
    },
    { ...base, id: 'e-missing', slug: 'm', name: 'missing fields', orderKey: 'a4' },
    {
      ...base,
      id: 'e-empty',
      slug: 'e',
      name: 'empty strings',
      orderKey: 'a5',
      description: '',
      emojiInfo: '',
      themeId: '',
      backgroundThemeId: '',
      bodyFontSize: '',
      contentStr: '',
      contentHtml: '',
      cover: { url: '', position: '' },
    },
    {
      ...base,
      id: 'e-tags',
      slug: 't',
      name: 'tags',
      orderKey: 'a6',
      tags: ['a,b', 'say "hi"', 'back\\slash', '{braces}', 'NULL', 'null', '', ' spaced ', 'tab\tnew\nline', '日本語'],
    },
    { ...base, id: 'e-emptytags', slug: 'et', name: 'empty tags', orderKey: 'a7', tags: [] },
    {
      ...base,
      id: 'e-yjs',
      slug: 'y',
      name: 'editor states',
      orderKey: 'a8',
      contentYjs: 'AAEC/f7/',
      contentJson: { text: 'tab\there "q" \\ \n 🚀', n: [1, 2.5, null, true] },
    },
    {
      ...base,
      id: 'e-yjs-text',
      slug: 'yt',
      name: 'placeholder state',
      orderKey: 'a9',
      contentYjs: 'not base64 ✓',
      contentJson: 'a JSON string',
    },
    {
      ...base,
      id: 'e-json-scalar',
      slug: 'js',
      name: 'json scalars',
      orderKey: 'aA',
      contentJson: 0,
      cover: { url: 'uploads/c.png', position: null },
      parentId: 'e-unicode',
      status: -3,
    },
    {
      ...base,
      id: 'e-fonts',
      slug: 'f',
      name: 'fonts',
      orderKey: 'aB',
      bodyFontSize: '14',
      themeId: 'serif',
      backgroundThemeId: 'paper',
      cover: { url: null, position: 'top' },
    },
  ];
}

t.test('COPY stores exactly what the seed loader stores (generated documents and edge cases)', async (t) => {
  const ref = await createTestDatabase(t);
  const cp = await createTestDatabase(t);
  const docs = [...take(SIZES.small, 11, 'bk'), ...edgeDocuments()];
  await writeWithSeedWriter(ref.sql, 'bk', docs);
  await writeWithCopy(t, cp.sql, 'bk', () => docs);
  const expected = await storedDocuments(ref.sql, 'bk');
  const actual = await storedDocuments(cp.sql, 'bk');
  t.equal(actual.length, docs.length);
  t.strictSame(actual, expected, 'every column of every row');
  const tags = actual.find((r) => r.id === 'e-tags')!.tags as string[];
  t.strictSame(tags, edgeDocuments()[6]!.tags, 'tags come back as written: commas, quotes, backslashes, NULL, empty');

  // Unset timestamps: the time of loading, as SeedWriter gives them.
  const missing = docs.find((d) => d.id === 'e-missing')!;
  await cp.sql`DELETE FROM documents WHERE id = 'e-missing'`;
  await writeWithCopy(t, cp.sql, 'unset', () => [{ ...missing, createdAt: undefined, updatedAt: null }]);
  const [r] = await cp.sql<{ fresh: boolean }[]>`
    SELECT created_at > now() - interval '1 minute' AND updated_at = created_at AS fresh FROM documents WHERE book_id = 'unset'`;
  t.ok(r!.fresh, 'COPY gives unset timestamps the load time');
});

t.test('COPY failures load nothing and leave the connection usable', async (t) => {
  const { sql } = await createTestDatabase(t);
  function* failing(): Generator<SeedDocument> {
    yield* generateDocuments({ bookId: 'bk', documents: 150, seed: 3 });
    throw new Error('generator broke');
  }
  await t.rejects(writeWithCopy(t, sql, 'bk', failing, 151), /generator broke/, 'the iterator error surfaces');
  const dup = [...take(60, 3, 'bk'), ...take(1, 3, 'bk')];
  await t.rejects(
    writeWithCopy(t, sql, 'bk', () => dup),
    { code: '23505' },
    'PostgreSQL rejects a duplicate id',
  );
  await t.rejects(
    writeWithCopy(t, sql, 'bk', () => [{ ...take(1)[0]!, id: 'x', bodyFontSize: '13' }]),
    { code: '23514' },
    'and a bad body_font_size',
  );
  const [{ n }] = (await sql`SELECT count(*)::int AS n FROM documents`) as unknown as [{ n: number }];
  t.equal(n, 0, 'nothing was loaded');
  await writeWithCopy(t, sql, 'bk', () => take(5, 3, 'bk'));
  const [{ m }] = (await sql`SELECT count(*)::int AS m FROM documents`) as unknown as [{ m: number }];
  t.equal(m, 5, 'the next COPY works');
});

t.test(
  'loadGenerated: user, key, book and documents; the export matches the estimate byte for byte; re-runs skip',
  async (t) => {
    const db = await createTestDatabase(t);
    const opts = {
      size: 'small' as const,
      bookId: 'bench-small',
      bookSlug: 'small',
      userId: 'bench-user',
      apiKey: 'kbx_bench_key',
      seed: 42,
    };
    const progress: number[] = [];
    const r = await loadGenerated(db.sql, { ...opts, onProgress: (n) => progress.push(n) });
    t.equal(r.skipped, false);
    t.equal(r.documents, SIZES.small);
    t.ok(r.bytes > 500_000, `${r.bytes} bytes of COPY text`);
    t.equal(progress.length, SIZES.small, 'progress after every document');
    t.equal((await verifyApiKey(db.sql, 'kbx_bench_key'))?.userId ?? null, 'bench-user', 'the key works');
    const [book] = await db.sql`SELECT owner_id, slug, description FROM books WHERE id = 'bench-small'`;
    t.strictSame(
      { ...book },
      { owner_id: 'bench-user', slug: 'small', description: generatorMarker({ documents: SIZES.small, seed: 42 }) },
    );
    t.strictSame(
      await storedDocuments(db.sql, 'bench-small'),
      await (async () => {
        const ref = await createTestDatabase(t);
        await writeWithSeedWriter(
          ref.sql,
          'bench-small',
          generateDocuments({ bookId: 'bench-small', documents: SIZES.small, seed: 42 }),
        );
        return storedDocuments(ref.sql, 'bench-small');
      })(),
      'the same rows as the seed loader would store',
    );

    const server = await startServer(t, {}, db);
    const res = await request(`${server.url}/api/v1/open/books/small/docs`, {
      headers: { authorization: 'Bearer kbx_bench_key' },
    });
    t.equal(res.statusCode, 200);
    const body = Buffer.from(await res.body.arrayBuffer());
    const estimate = estimateExportBytes({
      bookId: 'bench-small',
      bookSlug: 'small',
      userId: 'bench-user',
      documents: SIZES.small,
      seed: 42,
    });
    t.equal(body.length, estimate.bytes, `the export body is the estimated ${estimate.bytes} bytes`);
    const parsed = JSON.parse(body.toString('utf8')) as {
      book: Record<string, unknown>;
      documents: unknown[];
      meta: { count: number };
    };
    const expected = take(SIZES.small, 42, 'bench-small')
      .filter((d) => d.status === 1 && d.type !== 'category')
      .map((d) => exportedDocument(d));
    t.equal(parsed.meta.count, estimate.documents);
    t.strictSame(
      parsed.documents,
      expected,
      'every exported document is what exportedDocument predicts, in generation order',
    );
    const lower = estimateExportBytes({
      bookId: 'bench-small',
      bookSlug: 'small',
      userId: 'bench-user',
      documents: SIZES.small,
      seed: 42,
      rewrite: false,
    });
    t.ok(lower.bytes < estimate.bytes, 'without rewriting: a lower bound');

    const again = await loadGenerated(db.sql, opts);
    t.equal(again.skipped, true, 'the same parameters again: skipped');
    await t.rejects(
      loadGenerated(db.sql, { ...opts, seed: 43 }),
      /exists with other data.*replace/,
      'other parameters: refused',
    );
    const replaced = await loadGenerated(db.sql, { ...opts, seed: 43, replace: true, afterLoad: 'analyze' });
    t.equal(replaced.skipped, false, 'replace: reloaded');
    const [b2] =
      await db.sql`SELECT description, (SELECT count(*)::int FROM documents WHERE book_id = 'bench-small') AS n FROM books WHERE id = 'bench-small'`;
    t.strictSame({ ...b2 }, { description: generatorMarker({ documents: SIZES.small, seed: 43 }), n: SIZES.small });

    const second = await loadGenerated(db.sql, {
      ...opts,
      documents: 10,
      bookId: 'bench-ten',
      bookSlug: 'ten',
      afterLoad: 'none',
    });
    t.equal(second.documents, 10, 'a second book for the same user and key');
    await db.sql`INSERT INTO users (id, name) VALUES ('other', 'Other')`;
    await t.rejects(
      loadGenerated(db.sql, { ...opts, userId: 'other', bookId: 'x', bookSlug: 'x' }),
      /API key exists for another user/,
      "another user's key is refused",
    );
    await t.rejects(
      loadGenerated(db.sql, { ...opts, bookId: 'bench-taken', bookSlug: 'small' }),
      { code: '23505' },
      'a taken slug is refused',
    );
    const [{ n }] = (await db.sql`SELECT count(*)::int AS n FROM books`) as unknown as [{ n: number }];
    t.equal(n, 2, 'failed loads left nothing behind');
    await t.rejects(loadGenerated(db.sql, { ...opts, size: undefined }), RangeError, 'neither size nor documents');
  },
);

t.test(
  'CLI: --help, argument errors, a seed file that `kb-export load` accepts, loading into a database',
  async (t) => {
    const help = await run(GENERATE_CLI, ['--help']);
    t.equal(help.code, 0);
    for (const re of [
      /--size/,
      /small 100, medium 20,000, large 100,000/,
      /--seed-file/,
      /--database-url/,
      /--estimate/,
      /Examples/,
    ])
      t.match(help.stdout, re);
    const none = await run(GENERATE_CLI, ['--size', 'small']);
    t.not(none.code, 0, 'no output chosen: an error');
    t.match(none.stderr, /exactly one of --database-url, --seed-file, --estimate/);
    const bad = await run(GENERATE_CLI, ['--size', 'huge', '--estimate']);
    t.not(bad.code, 0);
    t.match(bad.stderr, /huge/);

    const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-gen-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'small.json');
    const wrote = await run(GENERATE_CLI, ['--size', 'small', '--seed', '5', '--seed-file', file, '--quiet']);
    t.equal(wrote.code, 0, wrote.stderr);
    t.match(wrote.stdout, /wrote .*small\.json: 100 documents/);

    const viaFile = await createTestDatabase(t);
    const loaded = await run(KB_CLI, ['load', file], { DATABASE_URL: viaFile.url });
    t.equal(loaded.code, 0, loaded.stderr);
    t.match(loaded.stdout, /loaded 1 users, 1 API keys, 1 knowledge bases, 100 documents/);
    t.equal((await verifyApiKey(viaFile.sql, 'kbx_bench_key'))?.userId ?? null, 'bench-user');
    const [key] = await viaFile.sql`SELECT id FROM api_keys`;
    t.equal(key!.id, apiKeyId('bench-user', 'kbx_bench_key'), 'the key id loadGenerated uses');

    const viaCli = await createTestDatabase(t, { migrate: false });
    const behind = await run(GENERATE_CLI, ['--size', 'small', '--seed', '5', '--database-url', viaCli.url, '--quiet']);
    t.not(behind.code, 0, 'an unmigrated database: refused');
    t.match(behind.stderr, /schema is behind.*kb-export migrate/);
    t.equal((await run(KB_CLI, ['migrate'], { DATABASE_URL: viaCli.url })).code, 0);
    const direct = await run(GENERATE_CLI, ['--size', 'small', '--seed', '5', '--database-url', viaCli.url, '--quiet']);
    t.equal(direct.code, 0, direct.stderr);
    t.match(direct.stdout, /loaded 100 documents .* into book bench-small/);
    t.strictSame(
      await storedDocuments(viaFile.sql, 'bench-small'),
      await storedDocuments(viaCli.sql, 'bench-small'),
      'seed file and COPY store the same rows',
    );
    const [b1] = await viaFile.sql`SELECT owner_id, slug, name, description, cover_image, created_at::text FROM books`;
    const [b2] = await viaCli.sql`SELECT owner_id, slug, name, description, cover_image, created_at::text FROM books`;
    t.strictSame({ ...b1 }, { ...b2 }, 'and the same book');
    t.equal(
      b1!.description,
      generatedBook({ bookId: 'bench-small', bookSlug: 'small', userId: 'bench-user', documents: 100, seed: 5 })
        .description,
    );
    const rerun = await run(GENERATE_CLI, ['--size', 'small', '--seed', '5', '--database-url', viaCli.url, '--quiet']);
    t.equal(rerun.code, 0);
    t.match(rerun.stdout, /already holds these 100 documents: nothing to do/);
    const refused = await run(GENERATE_CLI, [
      '--size',
      'small',
      '--seed',
      '6',
      '--database-url',
      viaCli.url,
      '--quiet',
    ]);
    t.equal(refused.code, 1);
    t.match(refused.stderr, /^generate: .*exists with other data/);

    const estimate = await run(GENERATE_CLI, ['--documents', '30', '--estimate', '--quiet']);
    t.equal(estimate.code, 0);
    const bytes = estimateExportBytes({
      bookId: 'bench-generated-30',
      bookSlug: 'generated-30',
      userId: 'bench-user',
      documents: 30,
    }).bytes;
    t.match(estimate.stdout, new RegExp(`: ${bytes} bytes`));
  },
);
