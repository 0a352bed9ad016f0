/**
 * The snapshot and its byte-bounded cursor over a real PostgreSQL (decisions.md D6.1, D8.4, D8.5):
 * batches of a size-skewed knowledge base stay within their budget, every row comes once in
 * order, and a statement that does not answer in time fails the snapshot without leaking its
 * connection.
 */
import { DOC, documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';
import { DependencyError } from '../../../src/errors.js';
import t, { type Test } from 'tap';
import { connect } from '../../../src/db/connect.js';
import { DocumentCursor } from '../../../src/export/snapshot/document-cursor.js';
import { SIZE_LISTED_OVER, SIZE_MARK_EVERY, type DocumentQueryOptions } from '../../../src/export/snapshot/query.js';
import { ROW_OVERHEAD_BYTES } from '../../../src/export/snapshot/batch-budget.js';
import { inSnapshot, type SnapshotTimeouts } from '../../../src/export/snapshot/snapshot.js';
import { doc, seed, simpleSeed } from '../../helpers/app.js';
import { createTestDatabase } from '../../helpers/db.js';

const TIMEOUTS: SnapshotTimeouts = { startMs: 5000, fetchMs: 10_000, lockMs: 5000, idleInTransactionMs: 60_000 };
const rowBytes = (row: DocumentRow) => row.reduce((n, col) => n + (col?.length ?? 0), 0);

/** Every batch of book `bookId`, read through a cursor of `budget` bytes on a connection of its own. */
async function readBatches(
  t: Test,
  url: string,
  bookId: string,
  opts: DocumentQueryOptions,
  budget: number,
): Promise<DocumentRow[][]> {
  const sql = connect(url, { max: 1, applicationName: 'kbx-test-export' });
  t.teardown(() => sql.end({ timeout: 1 }));
  return inSnapshot(sql, TIMEOUTS, async (snap) => {
    const cursor = await DocumentCursor.open(
      snap,
      opts,
      bookId,
      { all: true },
      { budgetBytes: budget, maxRows: 1000, firstRows: 16, startMs: 5000, fetchMs: 10_000 },
    );
    const out: DocumentRow[][] = [];
    for (let rows = await cursor.next(); rows !== null; rows = await cursor.next()) out.push(rows);
    await cursor.close();
    return out;
  });
}

t.test('a size-skewed knowledge base: every batch fits the budget or is one row (D8.4)', async (t) => {
  const db = await createTestDatabase(t);
  const MB = 1024 * 1024;
  // Small documents, then documents of 1 MB, then small ones again: a guess from the previous
  // batch's average would ask for hundreds of the large ones at once.
  const docs = [
    ...Array.from({ length: 300 }, (_, i) =>
      doc(`s${String(i).padStart(4, '0')}`, `a${String(i).padStart(4, '0')}`, { contentHtml: '<p>small</p>' }),
    ),
    ...Array.from({ length: 12 }, (_, i) =>
      doc(`l${i}`, `b${String(i).padStart(4, '0')}`, { contentHtml: 'y'.repeat(MB) }),
    ),
    ...Array.from({ length: 50 }, (_, i) =>
      doc(`t${i}`, `c${String(i).padStart(4, '0')}`, { contentStr: 'z'.repeat(3000) }),
    ),
  ];
  await seed(db.sql, simpleSeed(docs));
  const bookId = (await db.sql<{ id: string }[]>`SELECT id FROM books`)[0]!.id;
  const budget = 256 * 1024;
  const batches = await readBatches(t, db.url, bookId, { excludeCategories: true, includeContentHtml: true }, budget);

  t.equal(batches[0]!.length, 16, 'the first batch is small');
  for (const [i, batch] of batches.entries()) {
    const bytes = batch.reduce((n, r) => n + rowBytes(r), 0);
    if (batch.length > 1) t.ok(bytes <= budget, `batch ${i}: ${batch.length} rows, ${bytes} bytes within ${budget}`);
    else t.ok(batch.length === 1, `batch ${i}: one row of ${bytes} bytes`);
  }
  const large = batches.filter((b) => b.some((r) => rowBytes(r) > MB));
  t.equal(large.length, 12, 'each 1 MB document came in a batch of its own');
  t.ok(large.every((b) => b.length === 1));
  const ids = batches.flat().map(documentIdOf);
  t.same(
    ids,
    docs.map((d) => d.id),
    'every row once, in order key order (D1)',
  );
});

t.test('two batches are asked for ahead, never one past a row larger than the budget (D8.4)', async (t) => {
  const db = await createTestDatabase(t);
  const KB = 1024;
  // Small documents with two of 300 KB among them, against a budget of 64 KB.
  const docs = Array.from({ length: 400 }, (_, i) =>
    doc(`d${String(i).padStart(4, '0')}`, `a${String(i).padStart(4, '0')}`, {
      contentHtml: i === 150 || i === 151 ? 'x'.repeat(300 * KB) : '<p>small</p>',
    }),
  );
  await seed(db.sql, simpleSeed(docs));
  const bookId = (await db.sql<{ id: string }[]>`SELECT id FROM books`)[0]!.id;
  const sql = connect(db.url, { max: 1, applicationName: 'kbx-test-export' });
  t.teardown(() => sql.end({ timeout: 1 }));
  // Each batch FETCH as it is sent: how many rows next() had returned by then.
  const sent: number[] = [];
  let returned = 0;
  // After each batch returned: how many were asked for and not yet returned.
  const ahead: number[] = [];
  const batches = await inSnapshot(sql, TIMEOUTS, async (snap) => {
    const watched = {
      query<T>(text: string, params: readonly unknown[], opts: { raw?: boolean; timeoutMs: number }): Promise<T> {
        if (text.includes('FROM kb_export_cursor')) sent.push(returned);
        return snap.query<T>(text, params, opts);
      },
    };
    const cursor = await DocumentCursor.open(
      watched,
      { excludeCategories: true, includeContentHtml: true },
      bookId,
      { all: true },
      {
        budgetBytes: 64 * KB,
        maxRows: 20,
        firstRows: 4,
        startMs: 5000,
        fetchMs: 10_000,
      },
    );
    const out: DocumentRow[][] = [];
    for (let rows = await cursor.next(); rows !== null; rows = await cursor.next()) {
      out.push(rows);
      returned += rows.length;
      // Let every read-ahead the cursor chains be sent before counting what is outstanding.
      await new Promise((resolve) => setTimeout(resolve, 20));
      ahead.push(sent.length - out.length);
    }
    await cursor.close();
    return out;
  });
  t.same(
    batches.flat().map(documentIdOf),
    docs.map((d) => d.id),
    'every row once, in order',
  );
  t.equal(Math.max(...ahead), 2, 'at most two batches were asked for and not yet returned, and two were');
  const before = batches.map((_, i) => batches.slice(0, i).reduce((n, b) => n + b.length, 0));
  const large = batches.flatMap((batch, i) =>
    batch.some((r) => (r[DOC.contentHtml]?.length ?? 0) > 64 * KB) ? [i] : [],
  );
  t.equal(large.length, 2, 'two batches hold a large document');
  for (const i of large) {
    t.equal(batches[i]!.length, 1, `batch ${i} holds the large document alone`);
    t.equal(sent[i], before[i], `batch ${i} was asked for once every row before it was returned (${before[i]} rows)`);
  }
  t.equal(
    Math.max(...ahead.slice(large.at(-1)! + 1, -2)),
    2,
    'after the large documents, two batches are asked for ahead again',
  );
});

t.test('stored plans read with their rows count toward the budget (D8.4)', async (t) => {
  const db = await createTestDatabase(t);
  const docs = Array.from({ length: 200 }, (_, i) =>
    doc(`p${String(i).padStart(4, '0')}`, `a${String(i).padStart(4, '0')}`, { contentHtml: '<img src="a.png">' }),
  );
  await seed(db.sql, simpleSeed(docs));
  const bookId = (await db.sql<{ id: string }[]>`SELECT id FROM books`)[0]!.id;
  // Every tenth document has a plan of 100 KB: 200 KB of hex text in its row, against a budget of 256 KB.
  await db.sql`
    INSERT INTO rewrite_plans (document_id, plan_key, plan)
    SELECT id, sha256(id::bytea), CASE WHEN right(id, 1) = '0' THEN decode(repeat('ab', 100 * 1024), 'hex') ELSE '\x01'::bytea END
    FROM documents`;
  const budget = 256 * 1024;
  const batches = await readBatches(
    t,
    db.url,
    bookId,
    { excludeCategories: true, includeContentHtml: true, withPlans: true },
    budget,
  );
  const rows = batches.flat();
  t.equal(
    rows.filter((r) => (r[DOC.plan]?.length ?? 0) > 200 * 1024).length,
    20,
    'the large plans came with their rows',
  );
  t.ok(
    rows.every((r) => r[DOC.plan] !== null),
    'and every small one',
  );
  for (const [i, batch] of batches.entries()) {
    const bytes = batch.reduce((n, r) => n + rowBytes(r), 0);
    if (batch.length > 1) t.ok(bytes <= budget, `batch ${i}: ${batch.length} rows, ${bytes} bytes within ${budget}`);
  }
  t.same(
    rows.map(documentIdOf),
    docs.map((d) => d.id),
    'every row once, in order',
  );
});

t.test('an empty knowledge base: one empty first batch, then the end', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([]));
  const bookId = (await db.sql<{ id: string }[]>`SELECT id FROM books`)[0]!.id;
  const sql = connect(db.url, { max: 1, applicationName: 'kbx-test-export' });
  t.teardown(() => sql.end({ timeout: 1 }));
  const seen = await inSnapshot(sql, TIMEOUTS, async (snap) => {
    const cursor = await DocumentCursor.open(
      snap,
      { excludeCategories: false, includeContentHtml: false },
      bookId,
      { all: true },
      {
        budgetBytes: 1024,
        maxRows: 10,
        firstRows: 4,
        startMs: 5000,
        fetchMs: 5000,
      },
    );
    return [await cursor.next(), await cursor.next()];
  });
  t.same(seen, [[], null]);
});

t.test(
  'sizes listed sparsely: every count around the marker interval, rows over and under the threshold (D8.4)',
  async (t) => {
    const db = await createTestDatabase(t);
    const sql = connect(db.url, { max: 1, applicationName: 'kbx-test-export' });
    t.teardown(() => sql.end({ timeout: 1 }));
    // Books of 1 to 3 intervals and one row either side, each row's contentStr under or over the
    // size that gets it listed, a seeded random choice; the budget fits a few small rows only.
    let state = 7;
    const random = () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const counts = [
      1,
      SIZE_MARK_EVERY - 1,
      SIZE_MARK_EVERY,
      SIZE_MARK_EVERY + 1,
      2 * SIZE_MARK_EVERY,
      3 * SIZE_MARK_EVERY + 1,
    ];
    const books = counts.map((n, b) => ({
      id: `b${b}`,
      docs: Array.from({ length: n }, (_, i) =>
        doc(`b${b}-d${String(i).padStart(3, '0')}`, `k${String(i).padStart(3, '0')}`, {
          contentStr: 'x'.repeat(
            random() < 0.3 ? SIZE_LISTED_OVER + 1 + Math.floor(random() * 3000) : Math.floor(random() * 200),
          ),
        }),
      ),
    }));
    for (const book of books)
      await seed(db.sql, simpleSeed(book.docs, { user: `u-${book.id}`, slug: book.id, bookId: book.id }));
    const budget = 4 * (SIZE_LISTED_OVER + ROW_OVERHEAD_BYTES);
    for (const book of books) {
      let sizeRows = 0;
      const batches = await inSnapshot(sql, TIMEOUTS, async (snap) => {
        const counted = {
          async query<T>(
            text: string,
            params: readonly unknown[],
            opts: { raw?: boolean; timeoutMs: number },
          ): Promise<T> {
            const rows = await snap.query<T>(text, params, opts);
            if (text.includes('FROM kb_export_sizes')) sizeRows += (rows as unknown[]).length;
            return rows;
          },
        };
        const cursor = await DocumentCursor.open(
          counted,
          { excludeCategories: true, includeContentHtml: false },
          book.id,
          { all: true },
          { budgetBytes: budget, maxRows: 7, firstRows: 3, startMs: 5000, fetchMs: 10_000 },
        );
        const out: DocumentRow[][] = [];
        for (let rows = await cursor.next(); rows !== null; rows = await cursor.next()) out.push(rows);
        await cursor.close();
        return out;
      });
      t.same(
        batches.flat().map(documentIdOf),
        book.docs.map((d) => d.id),
        `${book.docs.length} rows: each once, in order`,
      );
      t.ok(
        batches.every((b) => b.length > 0 && b.length <= 7),
        'no empty batch before the end, none over maxRows',
      );
      const over = batches.filter((b) => b.length > 1 && b.reduce((n, r) => n + rowBytes(r), 0) > budget);
      t.same(over, [], 'every batch of more than one row within the budget');
      const listed = book.docs.filter(
        (d, i) => (d.contentStr as string).length > SIZE_LISTED_OVER || (i + 1) % SIZE_MARK_EVERY === 0,
      );
      t.equal(sizeRows, listed.length, `the size cursor sent ${sizeRows} rows for ${book.docs.length}`);
    }
  },
);

t.test(
  'a statement that does not answer in time fails the snapshot at once; its connection comes back (D8.5)',
  async (t) => {
    const db = await createTestDatabase(t);
    const sql = connect(db.url, { max: 1, applicationName: 'kbx-test-export' });
    t.teardown(() => sql.end({ timeout: 1 }));
    const started = Date.now();
    const err = await inSnapshot(sql, TIMEOUTS, (snap) =>
      snap.query('SELECT pg_sleep(2.5)', [], { timeoutMs: 200 }),
    ).then(
      () => null,
      (e: unknown) => e,
    );
    t.ok(err instanceof DependencyError, 'a DependencyError');
    t.ok(Date.now() - started < 2000, `failed after ${Date.now() - started} ms, before the statement ended`);
    // The pool has one connection: a second snapshot gets it once the slow statement ended and the
    // first transaction was rolled back.
    const rows = await inSnapshot(sql, TIMEOUTS, (snap) =>
      snap.query<{ one: number }[]>('SELECT 1 AS one', [], { timeoutMs: 5000 }),
    );
    t.equal(rows[0]?.one, 1);
    const open = await db.sql`
    SELECT 1 FROM pg_stat_activity WHERE datname = ${db.name} AND state LIKE 'idle in transaction%'`;
    t.equal(open.length, 0, 'no transaction left open');
  },
);

t.test("the session settings are the exporter's own, whatever the database defaults (D8.7)", async (t) => {
  const db = await createTestDatabase(t);
  await db.sql.unsafe(`ALTER DATABASE ${db.name} SET lock_timeout = 0`);
  await db.sql.unsafe(`ALTER DATABASE ${db.name} SET idle_in_transaction_session_timeout = 0`);
  const sql = connect(db.url, { max: 1, applicationName: 'kbx-test-export' });
  t.teardown(() => sql.end({ timeout: 1 }));
  const timeouts = { startMs: 4000, fetchMs: 9000, lockMs: 3000, idleInTransactionMs: 120_000 };
  const [row] = await inSnapshot(sql, timeouts, (snap) =>
    snap.query<{ lock: string; statement: string; idle: string; ro: string; iso: string; jit: string }[]>(
      `SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement,
              current_setting('idle_in_transaction_session_timeout') AS idle,
              current_setting('transaction_read_only') AS ro, current_setting('transaction_isolation') AS iso,
              current_setting('jit') AS jit`,
      [],
      { timeoutMs: 5000 },
    ),
  );
  // jit off: with enable_seqscan off, the one-row change_tracking's unavoidable scan costs 1e10, and
  // PostgreSQL compiled each query that read it (50-180 ms before the first byte).
  t.same(row, { lock: '3s', statement: '9s', idle: '2min', ro: 'on', iso: 'repeatable read', jit: 'off' });
});
