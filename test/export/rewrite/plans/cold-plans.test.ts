/**
 * Reading stored plans costs what the batch costs, whatever the planner believes of
 * rewrite_plans (plan-store.ts): after a bulk load and `VACUUM ANALYZE`, the statistics say the
 * table is empty, and the first export fills it as it goes. A plan that scans the table for each
 * batch or row makes that export's work grow with the square of the knowledge base.
 *
 * The quadratic term grows with the number of batches times the table's size, so 20,000 documents
 * in batches of 100 give the same 200 batches, and the same multiple of a linear export, as
 * 200,000 in the default batches of 1,000 did, at a tenth of the work. Two signals: the export's
 * time as a ratio against the same knowledge base exported without HTML, in the same run; and,
 * free of the machine's load, the rows PostgreSQL's own counters saw sequential scans read from
 * rewrite_plans (a scan per batch reads about 100 times the table's final size here, index
 * probes none).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { request } from 'undici';
import { seed, simpleSeed, startServer, type TestServer } from '../../../helpers/app.js';
import { createTestDatabase } from '../../../helpers/db.js';

const DOCS = 20_000;
const BATCH = 100;

/** Reads an export whole; resolves with its document count and the seconds it took. */
async function timedExport(server: TestServer, query: string): Promise<{ count: number; seconds: number }> {
  const started = performance.now();
  const res = await request(`${server.url}/api/v1/open/books/kb/docs${query}`, {
    headers: { authorization: 'Bearer kbx_u1' },
  });
  let tail = '';
  for await (const chunk of res.body) tail = (tail + (chunk as Buffer).toString('latin1')).slice(-60);
  const count = Number(/"count":(\d+)\}\}$/.exec(tail)?.[1]);
  return { count, seconds: (performance.now() - started) / 1000 };
}

t.test(
  `${DOCS.toLocaleString('en')} documents in batches of ${BATCH} exported cold after VACUUM ANALYZE of an empty rewrite_plans: within a small factor of the export without HTML`,
  async (t) => {
    const db = await createTestDatabase(t);
    await seed(db.sql, simpleSeed([]));
    await db.sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
    SELECT 'd' || i, 'b-u1', 's' || i, 'Doc ' || i, 'document', lpad(i::text, 7, '0'), 1, '<p>page ' || i || '</p><img src="img/' || i || '.png">'
    FROM generate_series(1, ${DOCS}) i`);
    await db.sql.unsafe('VACUUM ANALYZE documents, rewrite_plans');
    const server = await startServer(t, { EXPORT_CACHE_BYTES: '0', EXPORT_BATCH_SIZE: String(BATCH) }, db);

    const plain = await timedExport(server, '?includeContentHtml=false');
    const cold = await timedExport(server, '');
    t.equal(plain.count, DOCS);
    t.equal(cold.count, DOCS, 'the cold export is whole');
    const ratio = cold.seconds / plain.seconds;
    // Tokenizing every document costs a few times the plain export (4-6x beside one other test
    // file, 8x beside three, on two cores); a scan of the plans per batch or per row costs hundreds
    // of times more at this number of batches.
    t.ok(
      ratio < 20,
      `cold export ${cold.seconds.toFixed(1)} s against ${plain.seconds.toFixed(1)} s without HTML: ${ratio.toFixed(1)}x`,
    );

    // A backend reports its counters at the latest as it exits, before its socket closes: ending the
    // export pool makes them visible. Read before anything here counts rewrite_plans' rows.
    await server.exportSql.end({ timeout: 1 });
    const [scans] = await db.sql<{ seqRead: number; idxScans: number }[]>`
    SELECT coalesce(seq_tup_read, 0)::int AS "seqRead", coalesce(idx_scan, 0)::int AS "idxScans"
    FROM pg_stat_user_tables WHERE relname = 'rewrite_plans'`;
    t.ok(scans!.idxScans > 0, `the exports' probes of rewrite_plans were counted (${scans!.idxScans} index scans)`);
    t.ok(
      scans!.seqRead < DOCS,
      `sequential scans read ${scans!.seqRead} rows of rewrite_plans, fewer than one pass over the knowledge base`,
    );

    // The writer's queue drops what does not fit rather than slow the export: some, not all, are stored.
    let plans = 0;
    for (const started = Date.now(); plans === 0 && Date.now() - started < 10_000; await sleep(20)) {
      plans = (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`)[0]!.n;
    }
    t.ok(plans > 0, `plans were stored behind it (${plans})`);
  },
);
