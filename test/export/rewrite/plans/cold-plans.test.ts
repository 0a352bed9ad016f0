/**
 * Reading stored plans costs what the batch costs, whatever the planner believes of
 * rewrite_plans (plan-store.ts): after a bulk load and `VACUUM ANALYZE`, the statistics say the
 * table is empty, and the first export fills it as it goes. A plan that scans the table for each
 * batch or row makes that export's work grow with the square of the knowledge base. Measured as a
 * ratio against the same knowledge base exported without HTML, in the same run.
 */
import t from 'tap';
import { request } from 'undici';
import { seed, simpleSeed, startServer, type TestServer } from '../../../helpers/app.js';
import { createTestDatabase } from '../../../helpers/db.js';

const DOCS = 200_000;

/** Reads an export whole; resolves with its document count and the seconds it took. */
async function timedExport(server: TestServer, query: string): Promise<{ count: number; seconds: number }> {
  const started = performance.now();
  const res = await request(`${server.url}/api/v1/open/books/kb/docs${query}`, { headers: { authorization: 'Bearer kbx_u1' } });
  let tail = '';
  for await (const chunk of res.body) tail = (tail + (chunk as Buffer).toString('latin1')).slice(-60);
  const count = Number(/"count":(\d+)\}\}$/.exec(tail)?.[1]);
  return { count, seconds: (performance.now() - started) / 1000 };
}

t.test(`${DOCS.toLocaleString('en')} documents exported cold after VACUUM ANALYZE of an empty rewrite_plans: within a small factor of the export without HTML`, async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([]));
  await db.sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
    SELECT 'd' || i, 'b-u1', 's' || i, 'Doc ' || i, 'document', lpad(i::text, 7, '0'), 1, '<p>page ' || i || '</p><img src="img/' || i || '.png">'
    FROM generate_series(1, ${DOCS}) i`);
  await db.sql.unsafe('VACUUM ANALYZE documents, rewrite_plans');
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0' }, db);

  const plain = await timedExport(server, '?includeContentHtml=false');
  const cold = await timedExport(server, '');
  t.equal(plain.count, DOCS);
  t.equal(cold.count, DOCS, 'the cold export is whole');
  const ratio = cold.seconds / plain.seconds;
  // Tokenizing every document costs a few times the plain export (4-6x beside one other test
  // file, 8x beside three, on two cores); a scan of the plans per batch or per row costs hundreds
  // of times more at this size.
  t.ok(ratio < 20, `cold export ${cold.seconds.toFixed(1)} s against ${plain.seconds.toFixed(1)} s without HTML: ${ratio.toFixed(1)}x`);
  // The writer's queue drops what does not fit rather than slow the export: some, not all, are stored.
  await new Promise((r) => setTimeout(r, 500));
  const plans = (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`)[0]!.n;
  t.ok(plans > 0, `plans were stored behind it (${plans})`);
});
