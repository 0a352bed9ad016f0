/**
 * A document's rewrite plan goes with it (sql/0012_plans_without_foreign_key.sql): deleted on its
 * own or with its book, its id changed, `TRUNCATE documents`; other documents' plans stay. There is
 * no foreign key to do it, so this is the only thing that keeps plans from outliving documents.
 */
import t from 'tap';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';

const db = await createTestDatabase(t);
const { sql } = db;
const books = await seedGeneratedBooks(sql, [
  { slug: 'kept', documents: 6, paragraphs: 1, seed: 3 },
  { slug: 'gone', documents: 6, paragraphs: 1, seed: 4 },
]);
const kept = books.get('kept')!.ids;
const gone = books.get('gone')!.ids;

/** A plan for every document, as the plan writer stores them. */
async function planEveryDocument(): Promise<void> {
  await sql`TRUNCATE rewrite_plans`;
  await sql`INSERT INTO rewrite_plans (document_id, plan_key, plan)
            SELECT id, sha256(convert_to(id, 'UTF8')), '\\x01'::bytea FROM documents`;
}

async function documentIds(): Promise<string[]> {
  return (await sql<{ id: string }[]>`SELECT id FROM documents ORDER BY 1`).map((r) => r.id);
}

async function planned(): Promise<string[]> {
  return (await sql<{ id: string }[]>`SELECT document_id AS id FROM rewrite_plans ORDER BY 1`).map((r) => r.id);
}

t.test('there is no foreign key: a plan is written without locking its document', async (t) => {
  const fks = await sql`SELECT conname FROM pg_constraint WHERE conrelid = 'rewrite_plans'::regclass AND contype = 'f'`;
  t.equal(fks.length, 0);
});

t.test('deleting documents deletes their plans, and only theirs', async (t) => {
  await planEveryDocument();
  await sql`DELETE FROM documents WHERE id IN ${sql([kept[0]!, gone[1]!])}`;
  const left = await planned();
  t.notOk(left.includes(kept[0]!), 'the first deleted document has no plan');
  t.notOk(left.includes(gone[1]!), 'nor the second');
  t.same(left, await documentIds(), 'every other document keeps its plan');
});

t.test('a document whose id changes leaves no plan under its old id', async (t) => {
  await planEveryDocument();
  await sql`UPDATE documents SET id = ${kept[1]! + '-moved'} WHERE id = ${kept[1]!}`;
  const left = await planned();
  t.notOk(left.includes(kept[1]!), 'the old id has no plan');
  t.same(
    left,
    (await documentIds()).filter((id) => id !== kept[1]! + '-moved'),
    'every other plan is kept',
  );
  await sql`UPDATE documents SET id = ${kept[1]!} WHERE id = ${kept[1]! + '-moved'}`;
});

t.test("a deleted book's documents take their plans with them", async (t) => {
  await planEveryDocument();
  await sql`DELETE FROM books WHERE id = 'b-gone'`;
  const left = await planned();
  t.ok(
    gone.every((id) => !left.includes(id)),
    'none of its documents has a plan',
  );
  t.same(left, await documentIds(), "the other book's documents keep theirs");
  t.ok(left.includes(kept[2]!), 'among them the kept book documents');
});

t.test('TRUNCATE documents empties rewrite_plans too', async (t) => {
  await planEveryDocument();
  t.ok((await planned()).length > 0, 'plans before');
  const rollback = new Error('rolled back');
  const inside = await sql
    .begin(async (tx) => {
      await tx`TRUNCATE documents, rewrite_plans`;
      const [row] = await tx<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`;
      t.equal(row!.n, 0, 'naming both tables, as before, still works');
      throw rollback;
    })
    .catch((err: unknown) => err);
  t.equal(inside, rollback);
  t.ok((await planned()).length > 0, 'plans again after the rollback');
  await sql`TRUNCATE documents`;
  t.same(await planned(), [], 'none after documents alone are truncated');
});
