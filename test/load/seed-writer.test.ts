/**
 * The seed writer's batches are bounded in bytes as well as in documents, so that loading or
 * importing large documents never queues many of them in memory: what was written is read back
 * inside the writer's own transaction after each document.
 */
import t from 'tap';
import { SeedWriter } from '../../src/load/seed-writer.js';
import type { SeedDocument } from '../../src/load/seed-types.js';
import { createTestDatabase } from '../helpers/db.js';

function doc(id: string, contentHtml: string): SeedDocument {
  return {
    id,
    slug: id,
    name: id,
    type: 'document',
    parentId: null,
    orderKey: id,
    status: 1,
    contentHtml,
    contentStr: null,
  };
}

t.test('a batch is written once its contents reach batchBytes, whatever its count', async (t) => {
  const db = await createTestDatabase(t);
  const written: number[] = [];
  await db.sql.begin(async (tx) => {
    const w = new SeedWriter(tx as never, 500, 1000);
    await w.begin();
    await w.addUser({ id: 'u', name: 'U' }, 'user');
    await w.addBook({ id: 'b', ownerId: 'u', slug: 'kb', name: 'KB' }, 'book');
    const count = async () => Number((await tx`SELECT count(*)::int AS n FROM documents`)[0]!.n);
    for (const [id, size] of [
      ['a', 100],
      ['b', 300],
      ['c', 700],
      ['d', 5000],
      ['e', 10],
    ] as const) {
      await w.addDocument('b', doc(id, 'x'.repeat(size)));
      written.push(await count());
    }
    const summary = await w.finish();
    t.equal(summary.documents, 5);
    written.push(await count());
  });
  t.same(
    written,
    [0, 0, 3, 4, 4, 5],
    'three small ones reach 1,000 bytes together; a large one goes at once; the rest at the end',
  );
});

t.test(
  'a batch fails where it is waited for: the next call names the duplicate, not an aborted transaction',
  async (t) => {
    const db = await createTestDatabase(t);
    const err = await db.sql
      .begin(async (tx) => {
        const w = new SeedWriter(tx as never, 1);
        await w.begin();
        await w.addUser({ id: 'u', name: 'U' }, 'user');
        await w.addBook({ id: 'b', ownerId: 'u', slug: 'kb', name: 'KB' }, 'book');
        await w.addDocument('b', doc('a', 'x'));
        // Written while this call returns: its failure is only known at the next call.
        await w.addDocument('b', doc('a', 'y'));
        await w.addUser({ id: 'v', name: 'V' }, 'second user');
      })
      .then(
        () => null,
        (e: Error) => e,
      );
    t.match(err, { name: 'SeedError', message: /^duplicate document: Key \(id\)=\(a\) already exists/ });
    const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM documents`;
    t.equal(row!.n, 0, 'nothing written');
  },
);

t.test(
  'a large document is written as a row, then each of its contents in a statement of its own: stored as given',
  async (t) => {
    const db = await createTestDatabase(t);
    const html = `<p>${'naïve 日本 😀 '.repeat(60_000)}</p>`;
    const text = 'line\n'.repeat(250_000);
    await db.sql.begin(async (tx) => {
      const w = new SeedWriter(tx as never);
      await w.begin();
      await w.addUser({ id: 'u', name: 'U' }, 'user');
      await w.addBook({ id: 'b', ownerId: 'u', slug: 'kb', name: 'KB' }, 'book');
      await w.addDocument('b', doc('small', '<p>s</p>'));
      await w.addDocument('b', { ...doc('large', html), contentStr: text });
      await w.addDocument('b', { ...doc('empty', ''), contentHtml: null });
      t.equal((await w.finish()).documents, 3);
    });
    const rows = await db.sql<{ id: string; html: string | null; text: string | null }[]>`
    SELECT id, content_html AS html, content_str AS text FROM documents ORDER BY id`;
    t.same(
      rows.map((r) => [r.id, r.html?.length, r.text?.length]),
      [
        ['empty', undefined, undefined],
        ['large', html.length, text.length],
        ['small', 8, undefined],
      ],
    );
    const large = rows.find((r) => r.id === 'large')!;
    t.ok(large.html === html && large.text === text, 'contentHtml and contentStr of the large document as given');
  },
);

t.test('contents are compressed with lz4 where the server has it, pglz otherwise', async (t) => {
  const db = await createTestDatabase(t);
  const [setting] = await db.sql<
    { lz4: boolean }[]
  >`SELECT 'lz4' = ANY (enumvals) AS lz4 FROM pg_settings WHERE name = 'default_toast_compression'`;
  await db.sql.begin(async (tx) => {
    const w = new SeedWriter(tx as never);
    await w.begin();
    await w.addUser({ id: 'u', name: 'U' }, 'user');
    await w.addBook({ id: 'b', ownerId: 'u', slug: 'kb', name: 'KB' }, 'book');
    await w.addDocument('b', doc('a', '<p>a page of text </p>'.repeat(1000)));
    await w.finish();
  });
  const [row] = await db.sql<
    { method: string }[]
  >`SELECT pg_column_compression(content_html) AS method FROM documents WHERE id = 'a'`;
  t.equal(row!.method, setting!.lz4 ? 'lz4' : 'pglz', `this server ${setting!.lz4 ? 'has' : 'lacks'} lz4`);
  const [after] = await db.sql<{ v: string }[]>`SELECT current_setting('default_toast_compression') AS v`;
  t.equal(after!.v, 'pglz', "the setting was the load's transaction's only");
});
