/**
 * sql/0004_finite_timestamps.sql: books and documents refuse 'infinity' and '-infinity' timestamps,
 * which to_char would turn into NULL and the export into an aborted response (decisions.md D2.6,
 * D6.3); on a database that already holds some, the migration fails, says where, and applies nothing.
 */
import { rm } from 'node:fs/promises';
import t from 'tap';
import { migrationsUpTo } from '../../bench/lib/write-cost-variants.js';
import { migrate } from '../../src/db/migrate.js';
import { createTestDatabase } from '../helpers/db.js';

t.test('a non-finite timestamp is refused by the constraint, in an insert or an update', async (t) => {
  const { sql } = await createTestDatabase(t);
  await sql`INSERT INTO users (id, name) VALUES ('u', 'u')`;
  await t.rejects(
    sql`INSERT INTO books (id, owner_id, slug, name, updated_at) VALUES ('b-inf', 'u', 'inf', 'n', '-infinity')`,
    { code: '23514', constraint_name: 'books_timestamps_finite' },
  );
  await sql`INSERT INTO books (id, owner_id, slug, name) VALUES ('b', 'u', 'kb', 'n')`;
  await t.rejects(
    sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, created_at)
        VALUES ('d', 'b', 'd', 'd', 'document', 'a0', 1, 'infinity')`,
    { code: '23514', constraint_name: 'documents_timestamps_finite' },
  );
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('d', 'b', 'd', 'd', 'document', 'a0', 1)`;
  await t.rejects(sql`UPDATE documents SET updated_at = 'infinity'`, {
    code: '23514',
    constraint_name: 'documents_timestamps_finite',
  });
  await t.rejects(sql`UPDATE books SET created_at = '-infinity'`, {
    code: '23514',
    constraint_name: 'books_timestamps_finite',
  });
  const [row] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM documents WHERE isfinite(created_at) AND isfinite(updated_at)`;
  t.equal(row!.n, 1, 'the finite row is there, unchanged');
});

t.test('the migration refuses a database that holds infinity, names the tables, and changes nothing', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  const dir = await migrationsUpTo(3);
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await migrate(db.sql, dir);
  const sql = db.sql;
  await sql`INSERT INTO users (id, name) VALUES ('u', 'u')`;
  await sql`INSERT INTO books (id, owner_id, slug, name, updated_at) VALUES ('b-1', 'u', 'kb', 'n', 'infinity')`;
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, created_at)
            SELECT 'd-' || g, 'b-1', 'd', 'd', 'document', 'a0', 1, CASE WHEN g <= 2 THEN '-infinity'::timestamptz ELSE now() END
            FROM generate_series(1, 3) g`;
  let error: (Error & { code?: string }) | undefined;
  await migrate(sql).catch((err: Error) => (error = err));
  t.equal(error?.code, '23514');
  t.match(error?.message, /books: 1 row\(s\), e\.g\. id 'b-1'; documents: 2 row\(s\), e\.g\. id 'd-1'/);
  const applied = await sql<{ name: string }[]>`SELECT name FROM schema_migrations WHERE name LIKE '0004%'`;
  t.same(applied, [], 'not recorded');
  const constraints = await sql`SELECT 1 FROM pg_constraint WHERE conname LIKE '%timestamps_finite'`;
  t.equal(constraints.length, 0, 'no constraint added');
  const [left] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM documents WHERE NOT isfinite(created_at)`;
  t.equal(left!.n, 2, 'the data as it was');

  await sql`UPDATE books SET updated_at = created_at`;
  await sql`UPDATE documents SET created_at = updated_at WHERE NOT isfinite(created_at)`;
  t.ok((await migrate(sql)).includes('0004_finite_timestamps.sql'), 'applies once the rows are fixed');
});
