/**
 * Scenario 10 of `npm run bench` (rewrite plans, sql/0005_rewrite_plans.sql): the HTML export of the
 * large knowledge base against COPY of the same rows in the same run,
 *   - without plans (REWRITE_PLANS=false: every flagged contentHtml tokenized, as before plans),
 *   - cold: no stored plan, plans written behind the export,
 *   - warm: the second export, every plan stored,
 *   - after 1 % of the documents changed (their plans no longer match),
 * each with its peak RSS; and the plans' storage against the contentHtml bytes they cover. Every
 * export's body is checked to be byte-identical to the export without plans (by SHA-256).
 * `node dist/bench/plans.js [--size medium]` runs it alone.
 */
import { createHash } from 'node:crypto';
import { request } from 'undici';
import { Command } from 'commander';
import type { Sql } from '../src/db/connect.js';
import { SIZES } from '../src/generate/sizes.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase, type Dataset } from './lib/datasets.js';
import postgres from 'postgres';
import { documentQuery } from '../src/export/snapshot/query.js';
import { agent, copyOnce } from './lib/http-client.js';
import { startServer, type ServerProcess } from './lib/server-process.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
/** What the 1 % change appends to a document's HTML (and takes off again afterwards). */
const CHANGE = '<!--kbx-bench-changed-->';

interface Measured {
  ms: number;
  bytes: number;
  sha256: string;
  peak: number;
}

/** One HTML export of `slug`, drained and hashed as it arrives; its time and the server's peak RSS. */
async function measuredExport(server: ServerProcess, slug: string): Promise<Measured> {
  await server.resetPeak();
  const t0 = now();
  const res = await request(`${server.base}/api/v1/open/books/${slug}/docs`, {
    headers: { authorization: `Bearer ${BENCH_KEY}` },
    dispatcher: agent,
  });
  if (res.statusCode !== 200) throw new Error(`export of ${slug}: status ${res.statusCode}`);
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of res.body) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  const ms = now() - t0;
  return { ms, bytes, sha256: hash.digest('hex'), peak: await server.peakRss() };
}

/** Waits until the plan writer stopped adding rows (it writes behind the export). */
async function plansSettled(sql: Sql): Promise<number> {
  let last = -1;
  for (let i = 0; i < 600; i++) {
    const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`;
    if (row!.n === last) return last;
    last = row!.n;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('rewrite plans still being written after 150 s');
}

/** Time to drain `url` (a bench server route), ms. */
async function drainUrl(url: string): Promise<{ ms: number; bytes: number }> {
  const t0 = now();
  const res = await request(url, { dispatcher: agent });
  if (res.statusCode !== 200) throw new Error(`${url}: status ${res.statusCode}`);
  let bytes = 0;
  for await (const chunk of res.body) bytes += (chunk as Buffer).length;
  return { ms: now() - t0, bytes };
}

/**
 * The export's own cursor query (query.ts) read two ways by postgres.js in one process, rows
 * drained and dropped: FETCH batches of 100 rows in a READ ONLY, REPEATABLE READ transaction (as
 * the export reads them, without its size cursor), and one COPY (FORMAT binary). What the
 * database driver costs before anything is encoded.
 */
async function driverOnly(
  databaseUrl: string,
  bookId: string,
  html: boolean,
): Promise<{ fetchMs: number; copyMs: number; bytes: number }> {
  const query = documentQuery({ excludeCategories: true, includeContentHtml: html });
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {}, fetch_types: false });
  try {
    await sql`SELECT 1`;
    let t0 = now();
    let bytes = 0;
    await sql.begin('READ ONLY ISOLATION LEVEL REPEATABLE READ', async (tx) => {
      await tx.unsafe(`DECLARE kbx_bench NO SCROLL CURSOR FOR ${query}`, [bookId]);
      for (;;) {
        const rows = await tx.unsafe('FETCH FORWARD 100 FROM kbx_bench').raw();
        for (const row of rows) for (const col of row) bytes += (col as Buffer | null)?.length ?? 0;
        if (rows.length < 100) break;
      }
    });
    const fetchMs = now() - t0;
    t0 = now();
    const literal = `'${bookId.replace(/'/g, "''")}'`;
    const stream = await sql.unsafe(`COPY (${query.replace(/\$1/g, literal)}) TO STDOUT (FORMAT binary)`).readable();
    for await (const chunk of stream as AsyncIterable<Buffer>) void chunk;
    return { fetchMs, copyMs: now() - t0, bytes };
  } finally {
    await sql.end({ timeout: 1 });
  }
}

export interface PlansBenchOptions {
  databaseUrl: string;
  sql: Sql;
  large: Dataset;
  log: (line: string) => void;
}

/** Runs scenario 10 over `large`; leaves its data as it found it, its plans warm. */
export async function run(o: PlansBenchOptions): Promise<ScenarioResult> {
  const { sql, large, log } = o;
  const rows: ResultRow[] = [];
  const env = { EXPORT_CACHE_BYTES: '0' };
  const html = async (server: ServerProcess, what: string): Promise<Measured> => {
    log(`10. export ${large.name} with HTML, ${what}`);
    const m = await measuredExport(server, large.slug);
    log(`    ${mb(m.bytes)} in ${fmt(m.ms / 1000, 2)} s, peak RSS ${mb(m.peak)}`);
    return m;
  };
  const copy = async () => {
    log(`10. COPY ${large.name} with HTML`);
    const c = await copyOnce(o.databaseUrl, large.bookId, true);
    log(`    ${mb(c.bytes)} in ${fmt(c.totalMs / 1000, 2)} s`);
    return c.totalMs;
  };

  // TRUNCATE, not DELETE: the storage measured below is then what the plans take, not dead rows of earlier runs.
  await sql`TRUNCATE rewrite_plans`;
  const off = await startServer({ databaseUrl: o.databaseUrl, env: { ...env, REWRITE_PLANS: 'false' } });
  let before: Measured;
  let copyBefore: number;
  try {
    copyBefore = await copy();
    before = await html(off, 'REWRITE_PLANS=false');
  } finally {
    await off.stop();
  }
  const server = await startServer({ databaseUrl: o.databaseUrl, env });
  let cold: Measured, warm: Measured, changed: Measured, copyWarm: number, copyChanged: number, changedCount: number;
  let storage: { plans: number; tableBytes: number; coveredHtmlBytes: number; allHtmlBytes: number };
  let relay: { ms: number; bytes: number; copyMs?: number };
  try {
    cold = await html(server, 'cold (plans written behind it)');
    const plans = await plansSettled(sql);
    await sql`VACUUM ANALYZE rewrite_plans`;
    const [s] = await sql<{ table_bytes: string; covered: string; all_html: string }[]>`
      SELECT pg_total_relation_size('rewrite_plans')::text AS table_bytes,
             (SELECT coalesce(sum(octet_length(d.content_html)), 0) FROM documents d JOIN rewrite_plans p ON p.document_id = d.id)::text AS covered,
             (SELECT coalesce(sum(octet_length(content_html)), 0) FROM documents WHERE book_id = ${large.bookId} AND status = 1)::text AS all_html`;
    storage = {
      plans,
      tableBytes: Number(s!.table_bytes),
      coveredHtmlBytes: Number(s!.covered),
      allHtmlBytes: Number(s!.all_html),
    };
    copyWarm = await copy();
    warm = await html(server, 'warm (second export)');
    // 1 % of the documents that have a plan change: their stored plans no longer match.
    const changedRows = await sql`
      UPDATE documents SET content_html = content_html || ${CHANGE}
      WHERE id IN (SELECT document_id FROM rewrite_plans ORDER BY md5(document_id) LIMIT ${Math.ceil(large.exported / 100)})
      RETURNING id`;
    changedCount = changedRows.count;
    try {
      copyChanged = await copy();
      changed = await html(server, `after ${changedCount} documents (1 %) changed`);
    } finally {
      await sql`UPDATE documents SET content_html = left(content_html, -${CHANGE.length}::int) WHERE right(content_html, ${CHANGE.length}::int) = ${CHANGE}`;
    }
    log(`10. COPY relayed by the server to the client, against COPY`);
    const copyRelay = await copy();
    relay = await drainUrl(`${server.benchBase}/bench/relay/${encodeURIComponent(large.bookId)}`);
    relay.copyMs = copyRelay;
    log(`    ${mb(relay.bytes)} in ${fmt(relay.ms / 1000, 2)} s`);
  } finally {
    await server.stop();
  }
  const driver: { html: boolean; fetchMs: number; copyMs: number; bytes: number }[] = [];
  for (const withHtml of [false, true]) {
    log(`10. the driver alone, FETCH batches against COPY (FORMAT binary), HTML ${withHtml}`);
    const d = await driverOnly(o.databaseUrl, large.bookId, withHtml);
    log(`    FETCH ${fmt(d.fetchMs / 1000, 2)} s, COPY binary ${fmt(d.copyMs / 1000, 2)} s`);
    driver.push({ html: withHtml, ...d });
  }
  for (const m of [cold, warm])
    if (m.sha256 !== before.sha256) throw new Error('an export with plans differs from the export without them');
  const ratio = (m: Measured, copyMs: number) => m.ms / copyMs;
  const describe = (m: Measured) => `export ${fmt(m.ms / 1000, 2)} s, peak RSS ${mb(m.peak)}`;
  /** A row for an export measured against COPY, its target a ratio and the 150 MB peak. */
  const exportRow = (
    what: string,
    m: Measured,
    copyMs: number,
    maxRatio: number,
    extraTarget = '',
    extraMet = true,
  ): ResultRow => ({
    scenario: '10. Rewrite plans',
    what,
    baseline: `COPY ${fmt(copyMs / 1000, 2)} s`,
    measured: describe(m),
    ratio: ratio(m, copyMs),
    target: `≤ ${maxRatio}×${extraTarget}, ≤ 150 MB`,
    met: ratio(m, copyMs) <= maxRatio && m.peak <= 150e6 && extraMet,
  });
  rows.push(
    {
      scenario: '10. Rewrite plans',
      what: `${large.name} with HTML, without plans (REWRITE_PLANS=false, as before plans): ${mb(before.bytes)}`,
      baseline: `COPY ${fmt(copyBefore / 1000, 2)} s`,
      measured: describe(before),
      ratio: ratio(before, copyBefore),
      target: '',
      met: null,
    },
    exportRow(
      `cold: no stored plan, ${storage.plans.toLocaleString('en')} plans written behind the export; ${fmt(cold.ms / before.ms, 2)}× the export without plans`,
      cold,
      copyBefore,
      4,
      ', ≤ 1.1× without plans',
      cold.ms <= 1.1 * before.ms,
    ),
    exportRow('warm: the second export of the unchanged knowledge base, byte-identical', warm, copyWarm, 1.5),
    exportRow(
      `after ${changedCount.toLocaleString('en')} documents (1 %) changed: their plans no longer match and are computed again`,
      changed,
      copyChanged,
      1.7,
    ),
    {
      scenario: '10. Rewrite plans',
      what: `plan storage: ${storage.plans.toLocaleString('en')} plans (rewrite_plans with its index and TOAST) against the contentHtml they cover (${mb(storage.allHtmlBytes)} in all)`,
      baseline: `contentHtml ${mb(storage.coveredHtmlBytes)}`,
      measured: mb(storage.tableBytes),
      ratio: storage.tableBytes / storage.coveredHtmlBytes,
      target: '≤ 2 %',
      met: storage.tableBytes <= 0.02 * storage.coveredHtmlBytes,
    },
  );
  rows.push({
    scenario: '10. Rewrite plans',
    what: `for reference: COPY of the same rows relayed by a route of the bench server to the client (${mb(relay.bytes)}), nothing parsed: the floor of any server between the two`,
    baseline: `COPY ${fmt(relay.copyMs! / 1000, 2)} s`,
    measured: `relay ${fmt(relay.ms / 1000, 2)} s`,
    ratio: relay.ms / relay.copyMs!,
    target: '',
    met: null,
  });
  for (const d of driver) {
    rows.push({
      scenario: '10. Rewrite plans',
      what: `for reference: the driver alone, the export's cursor query with contentHtml ${d.html}, ${mb(d.bytes)} of row data: FETCH batches of 100 rows against one COPY (FORMAT binary), postgres.js, rows dropped`,
      baseline: `COPY binary ${fmt(d.copyMs / 1000, 2)} s`,
      measured: `FETCH ${fmt(d.fetchMs / 1000, 2)} s`,
      ratio: d.fetchMs / d.copyMs,
      target: '',
      met: null,
    });
  }
  return {
    rows,
    notes: [
      '10: each export drained by the bench client over HTTP with EXPORT_CACHE_BYTES=0 and the default REWRITE_WORKERS, against COPY of the ' +
        'same rows with contentHtml measured just before it; the cold and warm bodies are checked to have the SHA-256 of the export without plans. ' +
        `The 1 % change appends \`${CHANGE}\` to documents that have plans, and is taken off afterwards. Storage is pg_total_relation_size after ` +
        "VACUUM ANALYZE, against octet_length of the covered documents' stored contentHtml.",
    ],
  };
}

async function main(): Promise<void> {
  const opts = new Command('bench-plans')
    .description('Scenario 10 alone: HTML exports with and without rewrite plans against COPY.')
    .option('--size <name>', 'the knowledge base: medium or large', 'large')
    .parse()
    .opts<{ size: 'medium' | 'large' }>();
  const log = (line: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
  const db = await openBenchDatabase();
  try {
    const large = await ensureDataset(db.sql, opts.size, SIZES[opts.size], log);
    const result = await run({ databaseUrl: db.url, sql: db.sql, large, log });
    for (const r of result.rows)
      process.stdout.write(`${r.what} | ${r.baseline} | ${r.measured} | ${fmt(r.ratio, 2)}× (${r.target})\n`);
  } finally {
    await agent.close();
    await db.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: unknown) => {
    process.stderr.write(`bench-plans: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
