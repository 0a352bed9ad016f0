/**
 * books.export_version (sql/0003_export_version_random.sql, decisions.md D9.1): any change to a book
 * row or to an exported column of its documents, deletion and re-creation included, gives a version
 * never seen before; writes the export cannot see (the editor formats, values written again) leave
 * it as it is and take no lock on books.
 */
import { rm } from 'node:fs/promises';
import t, { type Test } from 'tap';
import type { Sql } from '../../src/db/connect.js';
import { migrationsUpTo } from '../../bench/lib/write-cost-variants.js';
import { migrate } from '../../src/db/migrate.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { EDITOR_COLUMNS, EXPORTED_COLUMN_CHANGES } from '../helpers/document-columns.js';

/** Every version a test has seen, so each new one can be checked against all of them. */
class Versions {
  private readonly seen = new Set<string>();
  constructor(private readonly sql: Sql) {}

  async of(bookId = 'b-u1'): Promise<string> {
    const [row] = await this.sql<{ v: string }[]>`SELECT export_version::text AS v FROM books WHERE id = ${bookId}`;
    return row!.v;
  }

  /** Reads the book's version and asserts it was never seen before. */
  async expectNew(t: Test, what: string, bookId = 'b-u1'): Promise<string> {
    const v = await this.of(bookId);
    t.notOk(this.seen.has(v), `${what}: a version never seen before (${v})`);
    this.seen.add(v);
    return v;
  }
}

const CHANGES = EXPORTED_COLUMN_CHANGES;
/** Kept by triggers for deltas (sql/0006, sql/0007, test/db/change-tracking.test.ts), never exported. */
const TRACKING_COLUMNS = ['changed_xid', 'changed_xid_no_html'];
/**
 * The exported columns' JSON text, kept by triggers (sql/0009, sql/0010, test/db/export-text.test.ts):
 * built from exported columns alone, so the version follows those.
 */
const EXPORT_TEXT_COLUMNS = ['export_head', 'export_mid', 'export_str', 'export_html'];

async function twoBooks(sql: Sql): Promise<void> {
  await seed(sql, simpleSeed([doc('d1', 'a0', { contentHtml: '<p>one</p>' }), doc('d2', 'a1')]));
  await seed(sql, simpleSeed([doc('e1', 'a0')], { user: 'u2' }));
}

t.test('every document column is either exported (and changes the version) or an editor format', async (t) => {
  const { sql } = await createTestDatabase(t);
  const columns = await sql<{ column_name: string }[]>`
    SELECT column_name FROM information_schema.columns WHERE table_name = 'documents' ORDER BY column_name`;
  t.same(
    columns.map((c) => c.column_name),
    [...Object.keys(CHANGES), ...EDITOR_COLUMNS, ...TRACKING_COLUMNS, ...EXPORT_TEXT_COLUMNS].sort(),
    'a new column needs a decision here and in sql/0003_export_version_random.sql and sql/0006_change_tracking.sql',
  );
});

t.test('an update of any exported column gives a new version; book_id moves both books on', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const versions = new Versions(sql);
  await versions.expectNew(t, 'loaded');
  await versions.expectNew(t, 'the other book', 'b-u2');
  for (const [column, expr] of Object.entries(CHANGES)) {
    const id = `c-${column.replace(/_/g, '-')}`;
    await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, created_at, updated_at)
              VALUES (${id}, 'b-u1', ${id}, ${id}, 'document', 'b0', 1, '2024-01-01', '2024-01-01')`;
    await versions.expectNew(t, `${column}: the row inserted`);
    await sql.unsafe(`UPDATE documents SET ${column} = ${expr} WHERE id = $1`, [id]);
    await versions.expectNew(t, `${column} changed`);
    if (column === 'book_id') await versions.expectNew(t, `${column} changed: the book it moved to`, 'b-u2');
  }
});

t.test('writes the export cannot see leave the version as it is', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const versions = new Versions(sql);
  const before = await versions.of();
  await sql`UPDATE documents SET content_yjs = '\\x0102', content_json = '{"type":"doc"}' WHERE id = 'd1'`;
  t.equal(await versions.of(), before, 'an autosave of content_yjs and content_json');
  await sql`UPDATE documents SET name = name`;
  t.equal(await versions.of(), before, 'SET name = name');
  const all = Object.keys(CHANGES)
    .map((c) => `${c} = ${c}`)
    .join(', ');
  await sql.unsafe(`UPDATE documents SET ${all}, content_yjs = '\\x03' WHERE book_id = 'b-u1'`);
  t.equal(await versions.of(), before, 'every exported column written with its own value');
  await sql`UPDATE books SET name = name, slug = slug, updated_at = updated_at WHERE id = 'b-u1'`;
  t.equal(await versions.of(), before, 'the book row written with its own values');
  await sql`UPDATE documents SET name = 'x' WHERE id = 'nope'`;
  t.equal(await versions.of(), before, 'an update that matches nothing');
});

t.test('an autosave takes no lock on books; a change waits for the writer holding it', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const writer = await sql.reserve();
  t.teardown(() => writer.release());
  await writer`BEGIN`;
  await writer`UPDATE documents SET name = 'renamed' WHERE id = 'd2'`;
  const withLockTimeout = (statement: string) =>
    sql.begin(async (tx) => {
      await tx`SET LOCAL lock_timeout = '100ms'`;
      await tx.unsafe(statement);
    });
  await withLockTimeout(`UPDATE documents SET content_yjs = '\\x01' WHERE id = 'd1'`);
  t.pass('the autosave went through while the book row was locked');
  await t.rejects(
    withLockTimeout(`UPDATE documents SET name = 'other' WHERE id = 'd1'`),
    { code: '55P03' },
    'a rename waits for the lock',
  );
  await writer`ROLLBACK`;
});

t.test('deletion and re-creation with the same ids and data never bring a version back', async (t) => {
  const { sql } = await createTestDatabase(t);
  const data = simpleSeed([doc('d1', 'a0'), doc('d2', 'a1'), doc('d3', 'a2')]);
  await seed(sql, data);
  const versions = new Versions(sql);
  await versions.expectNew(t, 'loaded');
  for (let i = 0; i < 3; i++) {
    await sql`DELETE FROM books WHERE id = 'b-u1'`;
    await seed(sql, { users: [], books: data.books });
    await versions.expectNew(t, `deleted and loaded again (${i + 1})`);
  }
  const rows = await sql`SELECT * FROM documents ORDER BY id`;
  await sql.begin(async (tx) => {
    await tx`DELETE FROM documents`;
    for (const r of [...rows].reverse()) await tx`INSERT INTO documents ${tx(r)}`;
  });
  await versions.expectNew(t, 'rows deleted and inserted again in another order');
  await sql`TRUNCATE documents, rewrite_plans`;
  await versions.expectNew(t, 'documents truncated');
  await sql`INSERT INTO documents ${sql(rows as unknown as Record<string, unknown>[])}`;
  await versions.expectNew(t, 'and inserted again');
  const [book] = await sql`SELECT * FROM books`;
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books`;
    // A restore of the book row as it was, version included: the insert gives it a new one.
    await tx`INSERT INTO books ${tx(book!)}`;
    await tx`INSERT INTO documents ${tx(rows as unknown as Record<string, unknown>[])}`;
  });
  await versions.expectNew(t, 'the book row restored with its old version, documents with it');
});

t.test('the book row: exported columns give a new version that no statement can choose', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const versions = new Versions(sql);
  await versions.expectNew(t, 'loaded');
  const old = await versions.of('b-u2');
  for (const [column, expr] of [
    ['slug', `'kb-2'`],
    ['name', `'New name'`],
    ['description', `'about'`],
    ['cover_image', `'cover.png'`],
    ['created_at', `created_at - interval '1 day'`],
    ['updated_at', `now()`],
    ['owner_id', `'u2'`],
  ]) {
    await sql.unsafe(`UPDATE books SET ${column} = ${expr} WHERE id = 'b-u1'`);
    await versions.expectNew(t, `${column} changed`);
  }
  await sql.unsafe(`UPDATE books SET name = 'Chosen', export_version = $1 WHERE id = 'b-u1'`, [old]);
  t.not(
    await versions.expectNew(t, 'a change with a version set by hand'),
    old,
    'the version given by the trigger, not the statement',
  );
});

t.test('one transaction writes the book row once, and gives each book a version of its own', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const versions = new Versions(sql);
  const updates = await sql.begin(async (tx) => {
    await tx`UPDATE documents SET name = name || '!'`;
    await tx`UPDATE documents SET slug = slug || '!' WHERE id = 'd1'`;
    await tx`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('d9', 'b-u1', 'd9', 'D9', 'document', 'a9', 1)`;
    const [s] = await tx<
      { n: number }[]
    >`SELECT n_tup_upd::int AS n FROM pg_stat_xact_user_tables WHERE relname = 'books'`;
    return s!.n;
  });
  t.equal(updates, 2, 'three statements over two books: one update of each book row');
  const a = await versions.expectNew(t, 'the first book');
  const b = await versions.expectNew(t, 'the second book', 'b-u2');
  t.not(a, b);
});

t.test('a token set for the whole session does not pin versions across transactions', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const versions = new Versions(sql);
  const session = await sql.reserve();
  t.teardown(() => session.release());
  await session`SET kbx.export_version_token = '1/fixed'`;
  for (const name of ['a', 'b', 'c']) {
    await session`UPDATE documents SET name = ${name} WHERE id = 'd1'`;
    await versions.expectNew(t, `renamed ${name}`);
  }
});

t.test(
  "documents has no BEFORE UPDATE trigger but the change tracking's and the export text's: the UPDATE OF trigger would miss its changes",
  async (t) => {
    const { sql } = await createTestDatabase(t);
    const before = await sql<{ tgname: string }[]>`
    SELECT tgname FROM pg_trigger
    WHERE tgrelid = 'documents'::regclass AND NOT tgisinternal AND tgtype & 2 <> 0 AND tgtype & 16 <> 0
    ORDER BY tgname`;
    t.same(
      before.map((r) => r.tgname),
      [
        'documents_changed_xid_guard',
        'documents_changed_xid_update',
        'documents_export_body_update',
        'documents_export_text_update',
      ],
      'see sql/0003_export_version_random.sql; the first two write changed_xid and changed_xid_no_html alone (test/db/change-tracking.test.ts), the third export_str and export_html alone (sql/0010), the fourth export_head and export_mid alone (sql/0009)',
    );
  },
);

t.test('books that existed before 0003 get distinct random versions', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  const dir = await migrationsUpTo(2);
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await migrate(db.sql, dir);
  await db.sql`INSERT INTO users (id, name) VALUES ('u', 'u')`;
  await db.sql`INSERT INTO books (id, owner_id, slug, name) SELECT 'b' || g, 'u', 's' || g, 'n' FROM generate_series(1, 3) g`;
  t.ok((await migrate(db.sql)).includes('0003_export_version_random.sql'));
  const rows = await db.sql<{ v: string }[]>`SELECT export_version::text AS v FROM books`;
  t.equal(new Set(rows.map((r) => r.v)).size, 3);
  for (const r of rows) t.match(r.v, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
});
