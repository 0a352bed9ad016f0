/**
 * Deltas at the SQL level on a real PostgreSQL (decisions.md D12.2, D12.3): the documents that
 * changed or entered since a snapshot and the ids that left, for both excludeCategories, decided by
 * transaction visibility. Each exactness test would fail if "since" were decided by a timestamp:
 * writers commit in another order than they start.
 */
import t, { type Test } from 'tap';
import type { Sql } from '../../../src/db/connect.js';
import { readChangeState } from '../../../src/export/change-state.js';
import {
  changedDocumentQuery,
  changedDocumentSizeQuery,
  removedQuery,
} from '../../../src/export/snapshot/changes-query.js';
import { documentQuery } from '../../../src/export/snapshot/query.js';
import { doc, seed, simpleSeed } from '../../helpers/app.js';
import { createTestDatabase } from '../../helpers/db.js';
import { applyDelta, deltaSince, exportAt } from '../../helpers/changes.js';
import { documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';

const BOOK = 'b-u1';

t.test('a writer that began before the export and committed after it is in the next delta', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2'), doc('d3', 'a3')]));
  const writer = await sql.reserve();
  t.teardown(() => writer.release());
  await writer`BEGIN`;
  const [{ at: writerAt }] = (await writer`SELECT now() AS at`) as unknown as [{ at: Date }];
  await writer`UPDATE documents SET name = 'late', updated_at = now() WHERE id = 'd1'`;
  await writer`DELETE FROM documents WHERE id = 'd2'`;
  await writer`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('d9', ${BOOK}, 'd9', 'D9', 'document', 'a9', 1)`;
  const before = await exportAt(sql, BOOK, { excludeCategories: true, includeContentHtml: true });
  t.same([...before.rows.keys()], ['d1', 'd2', 'd3'], 'the export did not see the writer');
  t.match(before.rows.get('d1'), /"Doc d1"/);
  await writer`COMMIT`;

  t.ok(
    writerAt < before.at,
    "the writer's changes carry a time before the export's: a timestamp filter would miss them for good",
  );
  const delta = await deltaSince(sql, BOOK, before.snapshot, { excludeCategories: true, includeContentHtml: true });
  t.same(delta.documents, ['d1', 'd9'], 'the rename and the creation');
  t.same(delta.removed, ['d2'], 'the deletion');
  t.match(delta.rows.get('d1'), /"late"/);
  const after = await exportAt(sql, BOOK, { excludeCategories: true, includeContentHtml: true });
  t.same(applyDelta(before.rows, delta), after.rows, 'applied to the earlier export, the delta gives the later one');
});

t.test('a writer that began first and commits last is in the delta since an export between the two', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2')]));
  const opts = { excludeCategories: false, includeContentHtml: true };
  const first = await exportAt(sql, BOOK, opts);
  const slow = await sql.reserve();
  t.teardown(() => slow.release());
  await slow`BEGIN`;
  const [{ x: slowXid }] = (await slow`SELECT pg_current_xact_id()::text AS x`) as unknown as [{ x: string }];
  const fast = await sql.begin(async (tx) => {
    await tx`UPDATE documents SET name = 'fast' WHERE id = 'd2'`;
    return (await tx<{ x: string }[]>`SELECT pg_current_xact_id()::text AS x`)[0]!.x;
  });
  const second = await exportAt(sql, BOOK, opts);
  const d1 = await deltaSince(sql, BOOK, first.snapshot, opts);
  t.same(d1.documents, ['d2'], 'the committed change only');
  await slow`UPDATE documents SET name = 'slow' WHERE id = 'd1'`;
  await slow`COMMIT`;
  t.ok(
    BigInt(slowXid) < BigInt(fast),
    'the slow writer has the smaller transaction id: "ids above the last one seen" would miss it',
  );
  const d2 = await deltaSince(sql, BOOK, second.snapshot, opts);
  t.same(d2.documents, ['d1'], 'the slow writer is in the delta since the export taken while it ran');
  const third = await exportAt(sql, BOOK, opts);
  t.same(applyDelta(applyDelta(first.rows, d1), d2), third.rows, 'both deltas applied give the latest export');
});

t.test('each kind of write, for both excludeCategories', async (t) => {
  const { sql } = await createTestDatabase(t);
  const ids = ['d01', 'd02', 'd03', 'd04', 'd05', 'd06', 'd07', 'd08', 'd09', 'd10', 'd11'];
  await seed(
    sql,
    simpleSeed([
      ...ids.map((id, i) => doc(id, `a${i}`, { contentHtml: `<p>${id}</p>` })),
      doc('c2', 'c2', { type: 'category' }),
    ]),
  );
  await seed(sql, simpleSeed([doc('e1', 'a0')], { user: 'u2' }));
  const opts = [false, true].map((excludeCategories) => ({ excludeCategories, includeContentHtml: true }));
  const before = await Promise.all(opts.map((o) => exportAt(sql, BOOK, o)));
  const otherBefore = await exportAt(sql, 'b-u2', opts[1]!);

  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('n1', ${BOOK}, 'n1', 'N1', 'document', 'b0', 1)`;
  await sql`UPDATE documents SET name = 'renamed' WHERE id = 'd01'`;
  await sql`UPDATE documents SET content_html = '<p>changed</p>' WHERE id = 'd02'`;
  await sql`DELETE FROM documents WHERE id = 'd03'`;
  await sql`UPDATE documents SET status = 0 WHERE id = 'd04'`;
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('c1', ${BOOK}, 'c1', 'C1', 'category', 'c1', 1)`;
  await sql`UPDATE documents SET type = 'category' WHERE id = 'd05'`;
  await sql`UPDATE documents SET content_yjs = '\\x0102', content_json = '{"a":1}' WHERE id = 'd06'`;
  await sql`UPDATE documents SET name = name, content_html = content_html WHERE id = 'd07'`;
  await sql`UPDATE documents SET name = 'for a moment' WHERE id = 'd08'`;
  await sql`UPDATE documents SET name = 'Doc d08' WHERE id = 'd08'`;
  const [d09] = await sql`SELECT * FROM documents WHERE id = 'd09'`;
  await sql`DELETE FROM documents WHERE id = 'd09'`;
  await sql`INSERT INTO documents ${sql(d09!)}`;
  await sql`UPDATE documents SET status = 0 WHERE id = 'd10'`;
  await sql`UPDATE documents SET status = 1 WHERE id = 'd10'`;
  await sql`UPDATE documents SET book_id = 'b-u2' WHERE id = 'd11'`;
  await sql`DELETE FROM documents WHERE id = 'c2'`;

  const want = [
    {
      documents: ['d01', 'd02', 'd05', 'd08', 'd09', 'd10', 'n1', 'c1'],
      removed: ['c2', 'd03', 'd04', 'd11'],
      why: 'excludeCategories=false: the new category and the document made one are changed; the deleted category left',
    },
    {
      documents: ['d01', 'd02', 'd08', 'd09', 'd10', 'n1'],
      removed: ['d03', 'd04', 'd05', 'd11'],
      why: 'excludeCategories=true: the document made a category left; categories never were in it',
    },
  ];
  for (const [i, o] of opts.entries()) {
    const delta = await deltaSince(sql, BOOK, before[i]!.snapshot, o);
    t.same(
      delta.documents,
      want[i]!.documents,
      `${want[i]!.why}: documents in export order, no autosave (d06), no rewrite of equal values (d07)`,
    );
    t.same(delta.removed, want[i]!.removed, `${want[i]!.why}: removed, never an id present now (d09, d10)`);
    t.same(
      applyDelta(before[i]!.rows, delta),
      (await exportAt(sql, BOOK, o)).rows,
      'applied, it gives the later export',
    );
  }
  const other = await deltaSince(sql, 'b-u2', otherBefore.snapshot, opts[1]!);
  t.same(other, { documents: ['d11'], removed: [], rows: other.rows }, 'the moved document entered the other book');
});

t.test('the delta size cursor gives one size per document row, in the same order', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2', { contentHtml: 'x'.repeat(5000) }), doc('d3', 'a3')]));
  const opts = { excludeCategories: true, includeContentHtml: true };
  const before = await exportAt(sql, BOOK, opts);
  await sql`UPDATE documents SET content_html = 'y' || coalesce(content_html, '') WHERE id IN ('d2', 'd3')`;
  const [sizes, rows] = await sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => [
    await tx.unsafe(changedDocumentSizeQuery(opts), [BOOK, before.snapshot, '{}']).values(),
    (await tx.unsafe(changedDocumentQuery(opts), [BOOK, before.snapshot, '{}']).raw()) as unknown as DocumentRow[],
  ]);
  t.equal(sizes.length, 2);
  t.same(rows.map(documentIdOf), ['d2', 'd3']);
  t.ok(Number(sizes[0]![0]) > 5000 && Number(sizes[1]![0]) < 100, 'd2 is the large one');
});

t.test('readChangeState: the snapshot of the transaction it runs in, the epoch, the floor, the database', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1')]));
  const [state, snapshot] = await sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => {
    const s = await readChangeState((text, params) => tx.unsafe(text, params) as never, BOOK);
    const [r] = await tx<{ s: string }[]>`SELECT pg_current_snapshot()::text AS s`;
    return [s, r!.s] as const;
  });
  const [book] = await sql<{ e: string }[]>`SELECT change_epoch::text AS e FROM books WHERE id = ${BOOK}`;
  t.match(state, { bookId: BOOK, changeEpoch: book!.e, snapshot, inRecovery: false, tokenFloor: '0', visible: null });
  const [{ tli }] = (await sql`SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS tli`) as unknown as [
    { tli: string },
  ];
  t.equal(state.timeline, parseInt(tli, 16), "the timeline of the primary's WAL");
  t.match(state.databaseId, /^\d+\/\d+$/);
  t.ok(Math.abs(state.nowS - Date.now() / 1000) < 60, 'the database clock, in seconds');
  await t.rejects(
    readChangeState((text, params) => sql.unsafe(text, params) as never, 'nope'),
    /no change state/,
  );
});

/** The plan of a cursor over `text` with `params`, as the export declares its cursors. */
async function plan(sql: Sql, text: string, params: string[]): Promise<string> {
  const rows = await sql.begin((tx) => tx.unsafe(`EXPLAIN DECLARE c NO SCROLL CURSOR FOR ${text}`, params));
  return rows.map((r) => r['QUERY PLAN'] as string).join('\n');
}

/** Asserts a plan reads documents through documents_changes_idx and removals through their book index. */
function readsChangesOnly(t: Test, text: string, what: string): void {
  t.notMatch(text, /Seq Scan on documents|documents_export_idx|documents_book_idx/, `${what}: no scan of the book`);
}

t.test('a delta of 10 changes in a book of 20,000 documents reads them through the indexes (D12.5)', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d0', 'a0')]));
  const loaded = await sql.begin(async (tx) => {
    await tx`
      INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
      SELECT 'g' || lpad(g::text, 6, '0'), ${BOOK}, 's' || g, 'Doc ' || g, CASE WHEN g % 10 = 0 THEN 'category' ELSE 'document' END,
             'k' || lpad(g::text, 6, '0'), CASE WHEN g % 17 = 0 THEN 0 ELSE 1 END, '<p>' || g || '</p>'
      FROM generate_series(1, 20000) g`;
    return BigInt((await tx<{ x: string }[]>`SELECT pg_current_xact_id()::text AS x`)[0]!.x);
  });
  await sql`ANALYZE documents`;
  // The server is shared: a write transaction older than the load, in any database, would keep the
  // token's xmin below it, and then the 20,000 rows are rightly candidates. Wait until none is left.
  const deadline = Date.now() + 60_000;
  while (
    BigInt((await sql<{ x: string }[]>`SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x`)[0]!.x) <= loaded
  ) {
    if (Date.now() > deadline) throw new Error('a transaction older than the load is still running after a minute');
    await new Promise((r) => setTimeout(r, 50));
  }
  const opts = { excludeCategories: true, includeContentHtml: true };
  const before = await exportAt(sql, BOOK, opts);
  await sql`UPDATE documents SET name = name || '!' WHERE id IN (SELECT 'g' || lpad((g * 1999)::text, 6, '0') FROM generate_series(1, 7) g)`;
  await sql`DELETE FROM documents WHERE id IN ('g000011', 'g000012', 'g000013')`;
  const delta = await deltaSince(sql, BOOK, before.snapshot, opts);
  t.equal(delta.documents.length + delta.removed.length, 10);

  const docsPlan = await plan(sql, changedDocumentQuery(opts), [BOOK, before.snapshot, '{}']);
  t.match(docsPlan, /documents_changes_idx/, 'documents found through documents_changes_idx');
  readsChangesOnly(t, docsPlan, 'documents');
  const lean = { ...opts, includeContentHtml: false };
  const leanPlan = await plan(sql, changedDocumentQuery(lean), [BOOK, before.snapshot, '{}']);
  t.match(leanPlan, /documents_changes_no_html_idx/, 'without contentHtml, through documents_changes_no_html_idx');
  readsChangesOnly(t, leanPlan, 'documents without contentHtml');
  const removedPlan = await plan(sql, removedQuery(opts), [BOOK, before.snapshot, '{}']);
  t.match(removedPlan, /document_removals_book_idx/, 'removals found through their book index');
  readsChangesOnly(t, removedPlan, 'removals');
  const full = await plan(sql, documentQuery(opts), [BOOK]);
  t.match(full, /documents_export_idx/, 'for comparison, the full export reads the book');
});
