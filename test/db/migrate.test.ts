import t from 'tap';
import { migrate } from '../../src/db/migrate.js';
import { createTestDatabase } from '../helpers/db.js';

t.test('migrations apply once, are recorded, and a second run applies nothing', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  const first = await migrate(db.sql);
  t.ok(first.includes('0001_init.sql'));
  const recorded = await db.sql`SELECT name FROM schema_migrations ORDER BY name`;
  t.same(
    recorded.map((r) => r.name),
    first,
  );
  t.same(await migrate(db.sql), []);
});

t.test('concurrent runs are serialised and apply each migration once', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  const [a, b] = await Promise.all([migrate(db.sql), migrate(db.sql)]);
  t.equal(a.length + b.length, a.length || b.length, 'only one run applied anything');
  const [{ n }] = (await db.sql`SELECT count(*)::int AS n FROM schema_migrations`) as unknown as [{ n: number }];
  t.equal(n, Math.max(a.length, b.length));
});

t.test('the export index serves the export query without a sort (D1.1, D1.2)', async (t) => {
  const db = await createTestDatabase(t);
  await db.sql`SET enable_seqscan = off`;
  const plan = await db.sql.unsafe(
    `EXPLAIN SELECT id FROM documents WHERE book_id = 'b' AND status = 1 ORDER BY order_key, id`,
  );
  const text = plan.map((r) => r['QUERY PLAN']).join('\n');
  t.match(text, /documents_export_idx/);
  t.notMatch(text, /Sort/);
});
