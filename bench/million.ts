/**
 * Scenario 11 (issue 21): a knowledge base of 1,000,000 small documents (about 400 bytes of JSON
 * each), where what each row costs around the cursor shows most. Against COPY of the same rows in
 * the same run: the export without HTML, and with HTML once every rewrite plan is stored
 * (`kb-export warm`'s own function); time to first byte of each. The book is generated in
 * PostgreSQL (generate_series) and kept in kb_export_bench.
 * `node dist/bench/million.js` runs it alone; DATABASE_URL names the server.
 */
import { loadConfig } from '../src/config.js';
import { warmPlans } from '../src/cli/warm-command.js';
import { BENCH_KEY, BENCH_USER, openBenchDatabase } from './lib/datasets.js';
import { copyOnce, exportOnce, median } from './lib/http-client.js';
import { ensureOwner } from './lib/load-generated.js';
import { startServer } from './lib/server-process.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';
import type { Sql } from '../src/db/connect.js';

export const MILLION_BOOK = 'bench-million';
export const MILLION_SLUG = 'million';
const DOCUMENTS = 1_000_000;

/** Creates the book unless it is there with every document. */
export async function ensureMillion(sql: Sql, log: (l: string) => void): Promise<void> {
  const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM documents WHERE book_id = ${MILLION_BOOK}`;
  if (row!.n === DOCUMENTS) return;
  log(`11. generating ${DOCUMENTS.toLocaleString('en')} small documents in PostgreSQL`);
  // Run alone on a new bench database, nothing has created the owner yet.
  await sql.begin((tx) => ensureOwner(tx, BENCH_USER, BENCH_KEY));
  await sql`DELETE FROM books WHERE id = ${MILLION_BOOK}`;
  await sql`INSERT INTO books (id, owner_id, slug, name) VALUES (${MILLION_BOOK}, ${BENCH_USER}, ${MILLION_SLUG}, 'A million small documents')`;
  await sql.unsafe(
    `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str, content_html)
     SELECT 'm' || lpad(i::text, 7, '0'), $1, 'm' || i, 'Note ' || i, 'document', lpad(i::text, 7, '0'), 1,
            'A short note, number ' || i || ', of a few words.', '<p>Note ' || i || '</p><img src="img/' || i || '.png">'
     FROM generate_series(1, $2::int) i`,
    [MILLION_BOOK, DOCUMENTS],
  );
  await sql`VACUUM ANALYZE documents`;
}

/** Scenario 11. */
export async function run(opts: {
  databaseUrl: string;
  sql: Sql;
  log: (line: string) => void;
}): Promise<ScenarioResult> {
  const { databaseUrl, sql, log } = opts;
  await ensureMillion(sql, log);
  log('11. storing every rewrite plan (kb-export warm)');
  await warmPlans(loadConfig({ ...process.env, DATABASE_URL: databaseUrl, REWRITE_WORKERS: '1' }), sql, {
    book: MILLION_SLUG,
  });
  const server = await startServer({ databaseUrl, env: { EXPORT_CACHE_BYTES: '0' } });
  const rows: ResultRow[] = [];
  try {
    for (const html of [false, true]) {
      const ours: number[] = [];
      const copies: number[] = [];
      const ttfb: number[] = [];
      let bytes = 0;
      await exportOnce(server.base, BENCH_KEY, MILLION_SLUG, { html });
      for (let i = 0; i < 3; i++) {
        copies.push((await copyOnce(databaseUrl, MILLION_BOOK, html)).totalMs);
        const r = await exportOnce(server.base, BENCH_KEY, MILLION_SLUG, { html });
        if (r.count !== DOCUMENTS) throw new Error(`export returned ${r.count} documents`);
        ours.push(r.totalMs);
        ttfb.push(r.ttfbMs);
        bytes = r.bytes;
      }
      const [o, c] = [median(ours), median(copies)];
      log(
        `11. ${html ? 'HTML, plans stored' : 'without HTML'}: ${fmt(o / 1000, 2)} s against COPY ${fmt(c / 1000, 2)} s, first byte ${fmt(median(ttfb), 0)} ms`,
      );
      rows.push({
        scenario: '11. A million small documents',
        what: `export ${html ? 'with HTML, every plan stored' : 'without HTML'} (${mb(bytes)}; ${fmt(DOCUMENTS / (o / 1000), 0)} documents/s; first byte ${fmt(median(ttfb), 0)} ms)`,
        baseline: `COPY of the same rows ${fmt(c / 1000, 2)} s`,
        measured: `${fmt(o / 1000, 2)} s`,
        ratio: o / c,
        target: '≤ 3× COPY, first byte ≤ 100 ms',
        met: o / c <= 3 && median(ttfb) <= 100,
      });
    }
  } finally {
    await server.stop();
  }
  return {
    rows,
    notes: [
      '11: medians of 3 alternating runs after one warm-up each; the book is generated in PostgreSQL, each document a short note with one image.',
    ],
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const db = await openBenchDatabase();
  try {
    const result = await run({ databaseUrl: db.url, sql: db.sql, log: (l) => process.stdout.write(`${l}\n`) });
    for (const r of result.rows)
      process.stdout.write(`${r.what} | ${r.baseline} | ${r.measured} | ${fmt(r.ratio, 2)}×\n`);
  } finally {
    await db.close();
  }
}
