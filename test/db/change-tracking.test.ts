/**
 * The change tracking of sql/0006_change_tracking.sql and 0007 (decisions.md D12.3):
 * documents.changed_xid is the id of the last transaction that changed an exported column, and
 * changed_xid_no_html of the last that changed one other than content_html, whatever a statement writes;
 * removals record who left which export; books get a new epoch on every insert; TRUNCATE expires
 * every token. The deltas built on these are tested in test/export/snapshot/changes-query.test.ts.
 */
import { rm } from 'node:fs/promises';
import t from 'tap';
import type { Sql } from '../../src/db/connect.js';
import { migrationsUpTo } from '../../bench/lib/write-cost-variants.js';
import { migrate } from '../../src/db/migrate.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { EXPORTED_COLUMN_CHANGES } from '../helpers/document-columns.js';

async function twoBooks(sql: Sql): Promise<void> {
  await seed(sql, simpleSeed([doc('d1', 'a0', { contentHtml: '<p>one</p>' }), doc('d2', 'a1')]));
  await seed(sql, simpleSeed([doc('e1', 'a0')], { user: 'u2' }));
}

/** The row of document `id` as JSON, the tracking columns and the export text (sql/0009, test/db/export-text.test.ts) apart, and its changed_xid and changed_xid_no_html. */
async function row(
  sql: Sql,
  id: string,
): Promise<{ data: Record<string, unknown>; xid: string; noHtml: string } | undefined> {
  const [r] = await sql<{ data: Record<string, unknown>; xid: string; noHtml: string }[]>`
    SELECT to_jsonb(d) - 'changed_xid' - 'changed_xid_no_html' - 'export_head' - 'export_mid' - 'export_str' - 'export_html' AS data, changed_xid::text AS xid, changed_xid_no_html::text AS "noHtml"
    FROM documents d WHERE id = ${id}`;
  return r;
}

/** Runs `statement` in a transaction of its own; returns that transaction's id. */
async function inXact(sql: Sql, statement: string, params: string[] = []): Promise<string> {
  return sql.begin(async (tx) => {
    await tx.unsafe(statement, params);
    const [r] = await tx<{ x: string }[]>`SELECT pg_current_xact_id()::text AS x`;
    return r!.x;
  });
}

interface Removal {
  book_id: string;
  document_id: string;
  removed_xid: string;
  reason: string;
  was_category: boolean;
}

// Ordered by the xid8 column, not by its text in the select list ("1000" sorts before "991").
const removals = (sql: Sql) =>
  sql<
    Removal[]
  >`SELECT book_id, document_id, removed_xid::text, reason, was_category FROM document_removals ORDER BY document_removals.removed_xid, document_id`;

t.test(
  'a change to any exported column sets changed_xid (and but for content_html changed_xid_no_html) to its transaction, and changes nothing else',
  async (t) => {
    const { sql } = await createTestDatabase(t);
    await twoBooks(sql);
    for (const [column, expr] of Object.entries(EXPORTED_COLUMN_CHANGES)) {
      const id = `c-${column.replace(/_/g, '-')}`;
      const inserted = await inXact(
        sql,
        `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, created_at, updated_at)
       VALUES ($1, 'b-u1', $1, $1, 'document', 'b0', 1, '2024-01-01', '2024-01-01')`,
        [id],
      );
      const before = await row(sql, id);
      t.equal(before?.xid, inserted, `${column}: the row inserted by its transaction`);
      t.equal(before?.noHtml, inserted, `${column}: changed_xid_no_html too`);
      const changed = await inXact(sql, `UPDATE documents SET ${column} = ${expr} WHERE id = $1`, [id]);
      const after = await row(sql, column === 'id' ? `${id}-x` : id);
      t.equal(after?.xid, changed, `${column} changed: changed_xid is the updating transaction's`);
      t.equal(after?.noHtml, column === 'content_html' ? inserted : changed, `${column} changed: changed_xid_no_html`);
      const differing = Object.keys(before!.data).filter(
        (k) => JSON.stringify(before!.data[k]) !== JSON.stringify(after!.data[k]),
      );
      t.same(differing, [column], `${column} changed: the triggers changed no other column`);
    }
  },
);

t.test('writes the export cannot see leave changed_xid as it is; no statement can choose it', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const xid = async () => (await row(sql, 'd1'))!.xid;
  const loaded = await xid();
  await sql`UPDATE documents SET content_yjs = '\\x0102', content_json = '{"type":"doc"}' WHERE id = 'd1'`;
  t.equal(await xid(), loaded, 'an autosave of content_yjs and content_json');
  await sql`UPDATE documents SET name = name`;
  t.equal(await xid(), loaded, 'SET name = name');
  const all = Object.keys(EXPORTED_COLUMN_CHANGES)
    .map((c) => `${c} = ${c}`)
    .join(', ');
  await sql.unsafe(`UPDATE documents SET ${all}, content_yjs = '\\x03' WHERE book_id = 'b-u1'`);
  t.equal(await xid(), loaded, 'every exported column written with its own value');
  await sql`UPDATE documents SET changed_xid = '3' WHERE id = 'd1'`;
  t.equal(await xid(), loaded, 'changed_xid written by hand is ignored');
  await sql`UPDATE documents SET changed_xid_no_html = '3' WHERE id = 'd1'`;
  t.equal((await row(sql, 'd1'))!.noHtml, loaded, 'changed_xid_no_html too');
  const renamed = await inXact(sql, `UPDATE documents SET name = 'x', changed_xid = '3' WHERE id = 'd1'`);
  t.equal(await xid(), renamed, 'a change that also writes changed_xid gets its own transaction id');
  const restored = await inXact(
    sql,
    `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, changed_xid)
     VALUES ('r1', 'b-u1', 'r1', 'R1', 'document', 'c0', 1, '3')`,
  );
  t.equal(
    (await row(sql, 'r1'))!.xid,
    restored,
    'a row inserted with an old changed_xid (a restore) gets this transaction id',
  );
  const restoredNoHtml = await inXact(
    sql,
    `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, changed_xid_no_html)
     VALUES ('r2', 'b-u1', 'r2', 'R2', 'document', 'c1', 1, '3')`,
  );
  t.match(await row(sql, 'r2'), { xid: restoredNoHtml, noHtml: restoredNoHtml }, 'or with an old changed_xid_no_html');
  t.same(await removals(sql), [], 'none of this removed anything');
});

t.test('removals: who left which export, under the old book and id, by which transaction', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(
    sql,
    simpleSeed([
      doc('del', 'a0'),
      doc('delcat', 'a1', { type: 'category' }),
      doc('delinactive', 'a2', { status: 0 }),
      doc('off', 'a3'),
      doc('tocat', 'a4'),
      doc('fromcat', 'a5', { type: 'category' }),
      doc('move', 'a6'),
      doc('renumber', 'a7'),
      doc('offcat', 'a8', { type: 'category' }),
      doc('m1', 'b1'),
      doc('m2', 'b2'),
      doc('m3', 'b3'),
    ]),
  );
  await seed(sql, simpleSeed([doc('e1', 'a0')], { user: 'u2' }));
  const expected: Removal[] = [];
  const step = async (statement: string, rows: Omit<Removal, 'removed_xid' | 'book_id'>[]) => {
    const x = await inXact(sql, statement);
    for (const r of rows) expected.push({ book_id: 'b-u1', removed_xid: x, ...r });
  };
  await step(`DELETE FROM documents WHERE id = 'del'`, [
    { document_id: 'del', reason: 'deleted', was_category: false },
  ]);
  await step(`DELETE FROM documents WHERE id = 'delcat'`, [
    { document_id: 'delcat', reason: 'deleted', was_category: true },
  ]);
  await step(`DELETE FROM documents WHERE id = 'delinactive'`, []);
  await step(`UPDATE documents SET status = 0 WHERE id = 'off'`, [
    { document_id: 'off', reason: 'inactivated', was_category: false },
  ]);
  await step(`UPDATE documents SET status = 2 WHERE id = 'off'`, []);
  await step(`UPDATE documents SET status = 0 WHERE id = 'offcat'`, [
    { document_id: 'offcat', reason: 'inactivated', was_category: true },
  ]);
  await step(`UPDATE documents SET type = 'category' WHERE id = 'tocat'`, [
    { document_id: 'tocat', reason: 'category', was_category: false },
  ]);
  await step(`UPDATE documents SET type = 'document' WHERE id = 'fromcat'`, []);
  await step(`UPDATE documents SET book_id = 'b-u2' WHERE id = 'move'`, [
    { document_id: 'move', reason: 'moved', was_category: false },
  ]);
  await step(`UPDATE documents SET id = 'renumbered' WHERE id = 'renumber'`, [
    { document_id: 'renumber', reason: 'moved', was_category: false },
  ]);
  await step(
    `DELETE FROM documents WHERE id IN ('m1', 'm2', 'm3')`,
    ['m1', 'm2', 'm3'].map((id) => ({ document_id: id, reason: 'deleted', was_category: false })),
  );
  await step(`UPDATE documents SET content_yjs = '\\x01', name = name WHERE book_id = 'b-u1'`, []);
  t.same(await removals(sql), expected);
});

t.test('a deleted book takes its removals with it, and the cascade to its documents records none', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  await sql`DELETE FROM documents WHERE id IN ('d2', 'e1')`;
  t.same((await removals(sql)).map((r) => r.book_id).sort(), ['b-u1', 'b-u2']);
  await sql`DELETE FROM books WHERE id = 'b-u1'`;
  t.same(
    (await removals(sql)).map((r) => `${r.book_id}/${r.document_id}`),
    ['b-u2/e1'],
    "only the other book's",
  );
  t.same(await sql`SELECT id FROM documents`, [], 'its documents are gone');
});

t.test('change_epoch: random, new on every insert of a book row whatever the INSERT says', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const epochs = async () =>
    (await sql<{ id: string; e: string }[]>`SELECT id, change_epoch::text AS e FROM books ORDER BY id`).map((r) => r.e);
  const first = await epochs();
  t.equal(new Set(first).size, 2, 'one per book');
  await sql`UPDATE books SET name = 'renamed' WHERE id = 'b-u1'`;
  t.same(await epochs(), first, 'a change to the book keeps its incarnation');
  const [book] = await sql`SELECT * FROM books WHERE id = 'b-u1'`;
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books WHERE id = 'b-u1'`;
    await tx`INSERT INTO books ${tx(book!)}`;
  });
  const again = await epochs();
  t.not(again[0], first[0], 'the book row restored with its old epoch gets a new one');
  t.equal(again[1], first[1]);
});

t.test('the token secret: 32 bytes, another in every database', async (t) => {
  const a = await createTestDatabase(t);
  const b = await createTestDatabase(t);
  const secret = async (sql: Sql) => (await sql<{ s: Buffer }[]>`SELECT token_secret AS s FROM change_tracking`)[0]!.s;
  const [sa, sb] = [await secret(a.sql), await secret(b.sql)];
  t.equal(sa.length, 32);
  t.notOk(sa.equals(sb));
  await t.rejects(
    a.sql`INSERT INTO change_tracking (token_secret, token_floor) VALUES (${sb}, '0')`,
    { code: '23505' },
    'one row',
  );
});

t.test('TRUNCATE of documents or of removals moves the token floor above the truncating transaction', async (t) => {
  const { sql } = await createTestDatabase(t);
  await twoBooks(sql);
  const floor = async () =>
    BigInt((await sql<{ f: string }[]>`SELECT token_floor::text AS f FROM change_tracking`)[0]!.f);
  t.equal(await floor(), 0n);
  const x = BigInt(await inXact(sql, 'TRUNCATE documents, rewrite_plans'));
  t.equal(await floor(), x + 1n, 'every transaction up to the TRUNCATE must have finished before a token is honoured');
  const y = BigInt(await inXact(sql, 'TRUNCATE document_removals'));
  t.equal(await floor(), y + 1n);
  await sql`SELECT kbx_expire_change_tokens()`;
  t.ok((await floor()) > y + 1n, 'and kbx_expire_change_tokens() does the same by hand');
});

t.test(
  'rows that existed before 0006 and 0007 are changed by their transactions, without a rewrite of documents',
  async (t) => {
    const db = await createTestDatabase(t, { migrate: false });
    const [dir, next] = [await migrationsUpTo(5), await migrationsUpTo(7)];
    t.teardown(() => Promise.all([dir, next].map((d) => rm(d, { recursive: true, force: true }))));
    await migrate(db.sql, dir);
    await twoBooks(db.sql);
    const file = async () => (await db.sql<{ f: string }[]>`SELECT pg_relation_filenode('documents')::text AS f`)[0]!.f;
    const before = await file();
    t.same(await migrate(db.sql, next), ['0006_change_tracking.sql', '0007_changes_without_html.sql']);
    t.equal(await file(), before, 'the table was not rewritten');
    const [m] = await db.sql<
      { x: string }[]
    >`SELECT xmin::text AS x FROM schema_migrations WHERE name = '0006_change_tracking.sql'`;
    for (const column of ['changed_xid', 'changed_xid_no_html']) {
      const xids = await db.sql.unsafe<{ x: string }[]>(
        `SELECT DISTINCT (${column}::text::numeric % 4294967296)::text AS x FROM documents`,
      );
      t.same(
        xids.map((r) => r.x),
        [m!.x],
        `every row's ${column} carries the migrations' transaction id (they run in one)`,
      );
    }
    const epochs = await db.sql<{ n: number }[]>`SELECT count(DISTINCT change_epoch)::int AS n FROM books`;
    t.equal(epochs[0]!.n, 2, 'existing books got an epoch each');
    const later = await inXact(
      db.sql,
      `INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('n', 'b-u1', 'n', 'N', 'document', 'z', 1)`,
    );
    t.equal((await row(db.sql, 'n'))!.xid, later, 'a row inserted later gets its own');
  },
);
