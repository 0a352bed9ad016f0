/**
 * The export text sql/0009 and sql/0010 keep (issue 43): the export's bytes are the same whether a row's text is
 * stored or still NULL (before, during and after the backfill); the trigger keeps it current on every
 * write of what it is built from, and on no other; the backfill fills it in resumable batches
 * without changing an export version or a delta.
 */
import t from 'tap';
import type { Sql } from '../../src/db/connect.js';
import { backfillExportText } from '../../src/db/backfill-export-text.js';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { call } from '../helpers/http.js';

/** Every kind of value the text holds: NULL and '' (D2.1, D2.2), escapes, non-ASCII, covers (D2.4), timestamps (D2.6). */
const DOCS = [
  doc('x-full', 'a0', {
    name: 'Quote " backslash \\ tab \t line\n',
    description: 'Über <b>',
    emojiInfo: '{"icon":"📘"}',
    parentId: 'x-null',
    cover: { url: './img/c.png', position: 'top' },
    tags: ['alpha', 'b"eta', 'ω'],
    themeId: 'serif',
    backgroundThemeId: 'paper',
    bodyFontSize: '14',
    createdAt: '2024-03-01T12:30:45.123+02:00',
    updatedAt: '1999-12-31T23:59:59.999Z',
    contentStr: 'text \u0001 control',
    contentHtml: '<p>x</p><img src="img/a.png">',
  }),
  doc('x-empty', 'a1', {
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
  doc('x-null', 'a2', {
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
  doc('x-cover-nopos', 'a3', { cover: { url: 'https://cdn.example/c.png' }, bodyFontSize: '12' }),
  doc('x-old', 'a4', { createdAt: '0044-03-15T00:00:00.000Z', updatedAt: '2200-01-01T00:00:00.5Z' }),
];

/**
 * The text's columns to NULL as a write that bypasses triggers would leave them, nothing else
 * changed: the fixed fields' (sql/0009), the bodies' (sql/0010), or both.
 */
async function forget(sql: Sql, ids?: string[], which: 'fixed' | 'bodies' | 'all' = 'all'): Promise<void> {
  const set = {
    fixed: 'export_head = NULL, export_mid = NULL',
    bodies: 'export_str = NULL, export_html = NULL',
    all: 'export_head = NULL, export_mid = NULL, export_str = NULL, export_html = NULL',
  }[which];
  await sql.begin(async (tx) => {
    await tx`SET LOCAL session_replication_role = replica`;
    if (ids) await tx.unsafe(`UPDATE documents SET ${set} WHERE id = ANY($1)`, [ids]);
    else await tx.unsafe(`UPDATE documents SET ${set}`);
  });
}

/** Rows with some text not filled; a body's is NULL when the body is NULL or '' (sql/0010). */
const missing = async (sql: Sql, which: 'fixed' | 'bodies' | 'all' = 'all') => {
  const fixed = 'export_head IS NULL OR export_mid IS NULL';
  const bodies = "(export_str IS NULL AND content_str <> '') OR (export_html IS NULL AND content_html <> '')";
  const where = { fixed, bodies, all: `${fixed} OR ${bodies}` }[which];
  return (await sql.unsafe<{ n: number }[]>(`SELECT count(*)::int AS n FROM documents WHERE ${where}`))[0]!.n;
};

/** What the columns should hold, from sql/0009's and sql/0010's functions over the row as it is now. */
const stale = async (sql: Sql) =>
  (
    await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM documents
    WHERE export_head IS DISTINCT FROM kbx_export_head(id, slug, name, type, parent_id, order_key, description, emoji_info)
       OR export_mid IS DISTINCT FROM kbx_export_mid(tags, theme_id, background_theme_id, body_font_size, created_at, updated_at)
       OR export_str IS DISTINCT FROM kbx_export_str(content_str)
       OR export_html IS DISTINCT FROM kbx_export_html(content_html)`
  )[0]!.n;

t.test('the export is byte-identical with the text stored, missing, half filled and backfilled', async (t) => {
  const srv = await startServer(t, { EXPORT_CACHE_BYTES: '0', MEDIA_PROXY_PREFIX: '/media/' });
  const { sql } = srv.db;
  await seed(sql, simpleSeed(DOCS));
  t.equal(await missing(sql), 0, "the loader's inserts got their text from the trigger");
  const bodies = async () =>
    Promise.all(
      ['true', 'false'].map(async (html) => {
        const res = await call(srv.url, `/api/v1/open/books/kb/docs?includeContentHtml=${html}`);
        t.equal(res.status, 200);
        return { text: res.text, etag: res.headers.etag };
      }),
    );
  const stored = await bodies();
  t.equal(stored[0]!.text.match(/"id":"x-/g)?.length, DOCS.length, 'every document exported');
  const tracking = async () => sql`SELECT id, changed_xid::text, changed_xid_no_html::text FROM documents ORDER BY id`;
  const version = async () => (await sql`SELECT export_version::text AS v FROM books`)[0]!.v as string;
  const [before, versionBefore] = [await tracking(), await version()];

  await forget(sql, ['x-full', 'x-null']);
  t.same(await bodies(), stored, 'two of the rows still NULL');
  await forget(sql, ['x-empty', 'x-cover-nopos'], 'bodies');
  t.same(
    await bodies(),
    stored,
    'and two more with only their fixed fields stored (after sql/0010, before the backfill)',
  );
  await forget(sql);
  t.equal(await missing(sql), DOCS.length);
  t.same(await bodies(), stored, 'every row NULL, as before the backfill');

  const done = await backfillExportText(sql, { batchRows: 2 });
  t.same(done, { rows: DOCS.length, batches: 3 });
  t.equal(await missing(sql), 0);
  t.equal(await stale(sql), 0);
  t.same(await bodies(), stored, 'backfilled');
  t.same(await tracking(), before, 'the backfill is no change to a delta (D12.3)');
  t.equal(await version(), versionBefore, 'nor to the export version (D9.1)');
});

t.test('the backfill resumes where a cut run stopped, and has nothing to do once done', async (t) => {
  const srv = await startServer(t);
  const { sql } = srv.db;
  await seed(sql, simpleSeed(DOCS));
  await forget(sql);
  const cut = new Error('cut');
  const first = backfillExportText(sql, {
    batchRows: 2,
    onBatch: () => {
      throw cut;
    },
  });
  await t.rejects(first, cut);
  t.equal(await missing(sql), DOCS.length - 2, 'the first batch was committed');
  t.same(await backfillExportText(sql, { batchRows: 2 }), { rows: DOCS.length - 2, batches: 2 });
  t.same(await backfillExportText(sql), { rows: 0, batches: 0 });
  t.equal(await stale(sql), 0);
});

t.test('the trigger keeps the text current on the writes it is built from, and only on those', async (t) => {
  const srv = await startServer(t);
  const { sql } = srv.db;
  await seed(sql, simpleSeed(DOCS));
  const writes = [
    `name = 'renamed "x"'`,
    `slug = 'new-slug'`,
    `type = 'category'`,
    `parent_id = 'x-empty'`,
    `order_key = 'a9'`,
    `description = 'd'`,
    `emoji_info = ''`,
    `tags = ARRAY['t']`,
    `theme_id = 'dark'`,
    `background_theme_id = NULL`,
    `body_font_size = '12'`,
    `created_at = created_at + interval '1 millisecond'`,
    `updated_at = '2030-01-01T00:00:00Z'`,
    `id = 'x-renamed'`,
  ];
  for (const set of writes) {
    await sql.unsafe(`UPDATE documents SET ${set} WHERE id IN ('x-full', 'x-renamed')`);
    t.equal(await stale(sql), 0, `after SET ${set}`);
  }
  for (const set of [
    `content_str = 'a "b"\n'`,
    `content_html = '<img src="x.png">'`,
    `content_str = ''`,
    `content_html = NULL`,
  ]) {
    await sql.unsafe(`UPDATE documents SET ${set} WHERE id = 'x-renamed'`);
    t.equal(await stale(sql), 0, `after SET ${set}`);
  }
  await sql`UPDATE documents SET export_head = 'forged', export_mid = NULL, export_str = 'forged', export_html = NULL`;
  t.equal(await stale(sql), 0, 'a write of its own to the text is replaced by what the functions return');

  await forget(sql, ['x-null', 'x-empty']);
  await sql`UPDATE documents SET content_yjs = '\\x00', content_json = '{}', content_str = 's', content_html = 'h'`;
  t.equal(
    await missing(sql, 'fixed'),
    2,
    "an UPDATE naming none of the fixed fields' columns does not run their trigger",
  );
  t.equal(await missing(sql, 'bodies'), 0, 'one naming the bodies runs theirs');
  await forget(sql, ['x-renamed'], 'bodies');
  await sql`UPDATE documents SET name = 'again' WHERE id = 'x-renamed'`;
  t.equal(await missing(sql, 'bodies'), 1, 'a rename does not escape the bodies again');
  const [renamed] = await sql<{ head: string }[]>`SELECT export_head AS head FROM documents WHERE id = 'x-renamed'`;
  t.match(renamed!.head, '"name":"again"', 'but rebuilds the fixed fields');
});

t.test('the export sends the stored text, not text it builds: a value written around the triggers shows', async (t) => {
  const srv = await startServer(t, { EXPORT_CACHE_BYTES: '0' });
  const { sql } = srv.db;
  await seed(sql, simpleSeed(DOCS));
  await sql.begin(async (tx) => {
    await tx`SET LOCAL session_replication_role = replica`;
    await tx`UPDATE documents SET export_str = '"stored str"', export_html = '"<p>stored html</p>"' WHERE id = 'x-full'`;
  });
  const res = await call(srv.url, '/api/v1/open/books/kb/docs');
  t.equal(res.status, 200);
  const full = (
    JSON.parse(res.text) as { documents: { id: string; contentStr: string; contentHtml: string }[] }
  ).documents.find((d) => d.id === 'x-full')!;
  t.equal(full.contentStr, 'stored str');
  t.equal(full.contentHtml, '<p>stored html</p>');
});

t.test("the bodies' text is compressed with lz4 where the server has it, its default otherwise", async (t) => {
  const srv = await startServer(t);
  const { sql } = srv.db;
  // Whether this server was built with lz4: setting the default to it is refused otherwise.
  const lz4 = await sql
    .begin(async (tx) => {
      await tx`SET LOCAL default_toast_compression = lz4`;
      return true;
    })
    .catch(() => false);
  const rows = await sql<{ attname: string; attcompression: string }[]>`
    SELECT attname, attcompression FROM pg_attribute
    WHERE attrelid = 'documents'::regclass AND attname IN ('export_str', 'export_html') ORDER BY attname`;
  t.same(
    rows.map((r) => [r.attname, r.attcompression]),
    [
      ['export_html', lz4 ? 'l' : ''],
      ['export_str', lz4 ? 'l' : ''],
    ],
    lz4 ? 'lz4' : 'no lz4 here: the default',
  );
});
