/**
 * `npm run bench` (and `npm run bench:quick`): generates the knowledge bases, drives the real server
 * (bench/server.ts, a separate process) over HTTP, and rewrites bench/RESULTS.md
 * (bench/RESULTS.quick.md for the quick run) with every scenario's figures against baselines
 * measured in the same run. Scenario numbers follow the benchmarks issue.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Command } from 'commander';
import { loadConfig } from '../src/config.js';
import { SIZES } from '../src/generate/sizes.js';
import { topSelfTime } from './lib/cpu-profile.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase, type Dataset } from './lib/datasets.js';
import { agent, copyOnce, exportOnce, median, type ExportRun } from './lib/http-client.js';
import { writeReport, type Report } from './lib/report.js';
import { startServer, type ServerProcess } from './lib/server-process.js';
import { machineInfo } from './machine.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';
import { run as runEncoder } from './encoder.js';
import { run as runRewriter } from './rewriter.js';
import { run as runHardening } from './hardening.js';
import { run as runPlans } from './plans.js';
import { run as runMillion } from './million.js';
import { run as runReplica } from './replica.js';
import { run as runBackup } from './backup.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The source folder (dist/bench -> bench), where RESULTS.md is kept. */
const BENCH_SRC = path.resolve(HERE, '..', '..', 'bench');

interface Plan {
  quick: boolean;
  sizes: { small: number; medium: number; large: number };
  /** Runs per timed measurement of the large export and its COPY baseline. */
  largeRuns: number;
  ttfbRuns: number;
  autocannonSeconds: number;
}

const log = (line: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
const mbs = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);

function row(
  scenario: string,
  what: string,
  baseline: string,
  measured: string,
  ratio: number,
  target: string,
  met: boolean | null,
): ResultRow {
  return { scenario, what, baseline, measured, ratio, target, met };
}

/** Scenario 1 (and the large half of 2): export vs COPY of the same rows, without and with HTML. */
async function throughput(
  server: ServerProcess,
  db: Awaited<ReturnType<typeof openBenchDatabase>>,
  large: Dataset,
  plan: Plan,
): Promise<ScenarioResult & { peakLarge: number; peakHtml: number; bodyBytes: number; copyHtmlMs: number }> {
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  // Scenario 2 takes the higher peak of the exports with and without HTML.
  let peakLarge = 0;
  let peakHtml = 0;
  let bodyBytes = 0;
  let copyHtmlMs = 0;
  for (const html of [false, true]) {
    const copies: number[] = [];
    const exports: ExportRun[] = [];
    let copyBytes = 0;
    for (let i = 0; i < plan.largeRuns; i++) {
      log(`1. COPY ${large.name} (HTML ${html}), run ${i + 1}/${plan.largeRuns}`);
      const c = await copyOnce(db.url, large.bookId, html);
      copies.push(c.totalMs);
      copyBytes = c.bytes;
      log(`   ${mb(c.bytes)} in ${fmt(c.totalMs / 1000, 2)} s`);
      log(`1. export ${large.name} (HTML ${html}), run ${i + 1}/${plan.largeRuns}`);
      await server.resetPeak();
      const e = await exportOnce(server.base, BENCH_KEY, large.slug, { html });
      const peak = await server.peakRss();
      peakLarge = Math.max(peakLarge, peak);
      if (html) peakHtml = Math.max(peakHtml, peak);
      if (e.count !== large.exported)
        throw new Error(`export of ${large.name} returned ${e.count} documents, expected ${large.exported}`);
      exports.push(e);
      log(`   ${mb(e.bytes)} in ${fmt(e.totalMs / 1000, 2)} s, peak RSS ${mb(peak)}`);
    }
    const copyMs = median(copies);
    const exportMs = median(exports.map((e) => e.totalMs));
    const bytes = exports[0]!.bytes;
    if (html) {
      bodyBytes = bytes;
      copyHtmlMs = copyMs;
    }
    rows.push(
      row(
        '1. Throughput',
        `${large.name}, includeContentHtml=${html}: ${large.exported.toLocaleString('en')} documents, ${mb(bytes)} of JSON ` +
          `(${fmt(mbs(bytes, exportMs))} MB/s, ${Math.round(large.exported / (exportMs / 1000)).toLocaleString('en')} documents/s)`,
        `COPY TO STDOUT ${fmt(copyMs / 1000, 2)} s (${mb(copyBytes)})`,
        `export ${fmt(exportMs / 1000, 2)} s`,
        exportMs / copyMs,
        html ? '≤ 3×' : '≤ 1.5×',
        exportMs / copyMs <= (html ? 3 : 1.5),
      ),
    );
  }
  if (!plan.quick) {
    // The benchmarks issue sizes `large` at 2e9 bytes or more; its export body is where that shows.
    rows.push(
      row(
        '1. Throughput',
        `${large.name}: export body with HTML, ${mb(bodyBytes)}`,
        '2e9 bytes',
        `${bodyBytes.toLocaleString('en')} bytes`,
        bodyBytes / 2e9,
        '≥ 1×',
        bodyBytes >= 2e9,
      ),
    );
  }
  notes.push(
    `1: time from request to the last byte, median of ${plan.largeRuns} run(s), against COPY of the exported columns as stored ` +
      "(same rows, columns, order; without the to_json the export's own cursor asks PostgreSQL for) drained by the same " +
      `client process; the server runs with its default REWRITE_WORKERS (${loadConfig({}).rewriteWorkers} on this machine) and REWRITE_PLANS=false ` +
      '(every flagged contentHtml parsed; scenario 10 has the exports with plans); ' +
      'every export body is checked to end with meta.count ' +
      'equal to the documents in the database.',
  );
  return { rows, notes, peakLarge, peakHtml, bodyBytes, copyHtmlMs };
}

/**
 * Scenario 1 again with HTML and REWRITE_WORKERS=0, for comparison: what the rewrite workers buy
 * in time and cost in peak RSS, against the COPY time measured for scenario 1.
 */
async function withoutWorkers(
  databaseUrl: string,
  large: Dataset,
  copyMs: number,
  peakWithWorkers: number,
): Promise<ScenarioResult> {
  const server = await startServer({
    databaseUrl,
    env: { EXPORT_CACHE_BYTES: '0', REWRITE_WORKERS: '0', REWRITE_PLANS: 'false' },
  });
  try {
    log(`1. export ${large.name} (HTML true), REWRITE_WORKERS=0`);
    await server.resetPeak();
    const e = await exportOnce(server.base, BENCH_KEY, large.slug, { html: true });
    const peak = await server.peakRss();
    if (e.count !== large.exported)
      throw new Error(`export of ${large.name} returned ${e.count} documents, expected ${large.exported}`);
    log(`   ${mb(e.bytes)} in ${fmt(e.totalMs / 1000, 2)} s, peak RSS ${mb(peak)}`);
    return {
      rows: [
        row(
          '1. Throughput',
          `${large.name}, includeContentHtml=true, rewriting on the event loop (REWRITE_WORKERS=0), for comparison: ` +
            `${fmt(mbs(e.bytes, e.totalMs))} MB/s, peak RSS ${mb(peak)} (with the default workers: ${mb(peakWithWorkers)})`,
          `COPY TO STDOUT ${fmt(copyMs / 1000, 2)} s`,
          `export ${fmt(e.totalMs / 1000, 2)} s`,
          e.totalMs / copyMs,
          '',
          null,
        ),
      ],
      notes: [],
    };
  } finally {
    await server.stop();
  }
}

/** Scenario 3: time to the status line and headers, small vs large, alternating runs. */
async function timeToFirstByte(
  server: ServerProcess,
  small: Dataset,
  large: Dataset,
  plan: Plan,
): Promise<ScenarioResult> {
  const s: number[] = [];
  const l: number[] = [];
  const settle = () => new Promise((r) => setTimeout(r, 300));
  for (let i = 0; i < plan.ttfbRuns; i++) {
    s.push((await exportOnce(server.base, BENCH_KEY, small.slug, { html: true })).ttfbMs);
    await settle();
    l.push((await exportOnce(server.base, BENCH_KEY, large.slug, { html: true, headersOnly: true })).ttfbMs);
    // The abandoned export stops at its next write; it must not overlap the next measurement.
    await settle();
  }
  const ms = median(s);
  const ml = median(l);
  log(`   median ${fmt(ms)} ms (${small.name}), ${fmt(ml)} ms (${large.name})`);
  return {
    rows: [
      row(
        '3. Time to first byte',
        `${large.name} vs ${small.name}, median of ${plan.ttfbRuns}`,
        `${small.name} ${fmt(ms)} ms`,
        `${large.name} ${fmt(ml)} ms`,
        ml / ms,
        '≤ 2×',
        ml / ms <= 2,
      ),
      row(
        '3. Time to first byte',
        `${large.name}, absolute`,
        '100 ms',
        `${fmt(ml)} ms`,
        ml / 100,
        '≤ 100 ms',
        ml <= 100,
      ),
    ],
    notes: [
      '3: request sent to status line and headers received, on a warm keep-alive connection, with the server otherwise idle; ' +
        'the large export is abandoned after its headers.',
    ],
  };
}

/** Scenario 2 (small and concurrent halves). */
async function memory(
  databaseUrl: string,
  small: Dataset,
  medium: Dataset,
  peakSmall: number,
  peakLarge: number,
  large: Dataset,
): Promise<ScenarioResult> {
  log(`2. 8 concurrent exports of ${medium.name}`);
  const server = await startServer({ databaseUrl, env: { EXPORT_CACHE_BYTES: '0' } });
  let peak8: number;
  let idle: number;
  let wallMs: number;
  try {
    idle = await server.rss();
    const t0 = Date.now();
    const runs = await Promise.all(
      Array.from({ length: 8 }, () => exportOnce(server.base, BENCH_KEY, medium.slug, { html: true })),
    );
    wallMs = Date.now() - t0;
    for (const r of runs)
      if (r.count !== medium.exported)
        throw new Error(`${medium.name}: ${r.count} documents, expected ${medium.exported}`);
    peak8 = await server.peakRss();
    const total = runs.reduce((a, r) => a + r.bytes, 0);
    log(`   ${mb(total)} in ${fmt(wallMs / 1000, 2)} s, peak RSS ${mb(peak8)}`);
  } finally {
    await server.stop();
  }
  return {
    rows: [
      row(
        '2. Flat memory',
        `peak RSS exporting ${large.name} (the higher of the exports with and without HTML)`,
        '150 MB',
        mb(peakLarge),
        peakLarge / 150e6,
        '≤ 150 MB',
        peakLarge <= 150e6,
      ),
      row(
        '2. Flat memory',
        `peak RSS, ${large.name} vs ${small.name}`,
        `${small.name} ${mb(peakSmall)}`,
        `${large.name} ${mb(peakLarge)} (+${mb(peakLarge - peakSmall)})`,
        peakLarge / peakSmall,
        '≤ small + 30 MB',
        peakLarge - peakSmall <= 30e6,
      ),
      row(
        '2. Flat memory',
        `peak RSS, 8 concurrent exports of ${medium.name} (${fmt(wallMs / 1000, 1)} s)`,
        `idle ${mb(idle)}`,
        mb(peak8),
        peak8 / idle,
        '≤ 300 MB',
        peak8 <= 300e6,
      ),
    ],
    notes: [
      '2: VmHWM of the server process from /proc/<pid>/status, reset through /proc/<pid>/clear_refs before each measurement ' +
        '(the reset keeps what the process already holds). Scenarios 1-3 run with EXPORT_CACHE_BYTES=0: every export streams.',
    ],
  };
}

/** Scenario 4: autocannon against the export and against the same bytes from memory, same process. */
async function underLoad(databaseUrl: string, small: Dataset, plan: Plan): Promise<ScenarioResult> {
  const server = await startServer({ databaseUrl });
  try {
    const exportPath = `/api/v1/open/books/${small.slug}/docs?includeContentHtml=true`;
    const headers = { authorization: `Bearer ${BENCH_KEY}` };
    // Fills the ceiling's cache and checks both answer the same bytes.
    const real = await fetch(server.base + exportPath, { headers });
    const ceiling = await fetch(`${server.benchBase}/bench/ceiling${exportPath}`, { headers });
    const a = Buffer.from(await real.arrayBuffer());
    const b = Buffer.from(await ceiling.arrayBuffer());
    if (real.status !== 200 || ceiling.status !== 200 || !a.equals(b))
      throw new Error('the in-memory ceiling does not serve the export bytes');
    const run = async (url: string, seconds: number) =>
      autocannon({ url, connections: 64, duration: seconds, headers });
    log(`4. autocannon warm-up`);
    await run(`${server.benchBase}/bench/ceiling${exportPath}`, 2);
    await run(server.base + exportPath, 2);
    log(`4. autocannon, in-memory ceiling, ${plan.autocannonSeconds} s`);
    const ceil = await run(`${server.benchBase}/bench/ceiling${exportPath}`, plan.autocannonSeconds);
    log(`4. autocannon, export, ${plan.autocannonSeconds} s`);
    const exp = await run(server.base + exportPath, plan.autocannonSeconds);
    const ratio = exp.requests.average / ceil.requests.average;
    const desc = (r: autocannon.Result) =>
      `${fmt(r.requests.average)} req/s, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, ${r.non2xx} non-2xx, ` +
      `${r.errors} errors (${r.timeouts} timeouts)`;
    return {
      rows: [
        row(
          '4. Small responses under load',
          `${small.name} with HTML (${mb(a.length, 2)}), 64 connections, ${plan.autocannonSeconds} s`,
          `in-memory ${desc(ceil)}`,
          `export ${desc(exp)}`,
          ratio,
          '≥ 0.5×, no non-2xx',
          ratio >= 0.5 && exp.non2xx === 0,
        ),
      ],
      notes: [
        "4: both served by the same server process with its default configuration; the ceiling sends the export's own bytes, kept in memory, " +
          'from a route with no authentication, rate limit or database. The export route still authenticates, rate-limits and looks the ' +
          'knowledge base up on every request, then serves the body kept by its export cache (EXPORT_CACHE_BYTES) while the export version is unchanged. ' +
          'Errors are what autocannon counts as requests it could not complete (timeouts shown apart); the target is about status codes.',
      ],
    };
  } finally {
    await server.stop();
  }
}

/** Scenario 7: a CPU profile of the server while it exports `large` with HTML. */
async function profile(databaseUrl: string, large: Dataset): Promise<Report['profile']> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kb-export-prof-'));
  try {
    const server = await startServer({ databaseUrl, cpuProfDir: dir });
    let run: ExportRun;
    try {
      log(`7. CPU profile of the ${large.name} export`);
      run = await exportOnce(server.base, BENCH_KEY, large.slug, { html: true });
    } finally {
      await server.stop();
    }
    // One profile per thread: the event loop's and each rewrite worker's.
    const files = (await readdir(dir)).filter((f) => f.endsWith('.cpuprofile'));
    if (files.length === 0) throw new Error('the server wrote no CPU profile');
    const { top, totalMs } = await topSelfTime(
      files.map((f) => path.join(dir, f)),
      15,
    );
    const threads =
      files.length === 1
        ? 'one thread'
        : `${files.length} threads (the event loop and ${files.length - 1} rewrite worker(s)), summed`;
    return {
      top,
      totalMs,
      what: `\`node --cpu-prof\` of the server exporting ${large.name} with HTML, its rewrite plans stored (scenario 10) (${mb(run.bytes)} in ${fmt(run.totalMs / 1000, 1)} s, profiler on), ${threads}`,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const program = new Command('bench')
    .description('Benchmarks kb-export against baselines measured in the same run, and rewrites bench/RESULTS.md.')
    .option('--quick', 'small sizes and short runs (under 2 minutes); writes bench/RESULTS.quick.md', false)
    .option('--no-write', 'print the figures without writing a results file')
    .addHelpText(
      'after',
      '\nWith DATABASE_URL, data is kept in a database kb_export_bench on that server and reused while the generator is unchanged;' +
        '\notherwise a throw-away embedded PostgreSQL is used.',
    )
    .parse();
  const opts = program.opts<{ quick: boolean; write: boolean }>();
  const plan: Plan = opts.quick
    ? {
        quick: true,
        sizes: { small: SIZES.small, medium: 1_000, large: 5_000 },
        largeRuns: 2,
        ttfbRuns: 5,
        autocannonSeconds: 5,
      }
    : {
        quick: false,
        sizes: { small: SIZES.small, medium: SIZES.medium, large: SIZES.large },
        largeRuns: 1,
        ttfbRuns: 7,
        autocannonSeconds: 20,
      };
  const started = Date.now();
  const db = await openBenchDatabase();
  const rows: ResultRow[] = [];
  const notes: string[] = [];
  const add = (r: ScenarioResult) => {
    rows.push(...r.rows);
    notes.push(...r.notes);
  };
  try {
    const [{ version }] = (await db.sql`SELECT current_setting('server_version') AS version`) as unknown as [
      { version: string },
    ];
    // The quick run's sizes have names of their own, so quick and full runs on one DATABASE_URL
    // do not reload each other's data.
    const suffix = plan.quick ? '-quick' : '';
    const small = await ensureDataset(db.sql, 'small', plan.sizes.small, log);
    const medium = await ensureDataset(db.sql, `medium${suffix}`, plan.sizes.medium, log);
    const large = await ensureDataset(db.sql, `large${suffix}`, plan.sizes.large, log);

    // Scenarios 1-3 measure the streaming pipeline: no body is served from the export cache, and
    // every flagged contentHtml is parsed (REWRITE_PLANS=false), as before plans; scenario 10 measures plans.
    const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false' } });
    let s1;
    let peakSmall = 0;
    let smallBytes = 0;
    try {
      log(`2. peak RSS exporting ${small.name}`);
      for (let i = 0; i < 5; i++)
        smallBytes = (await exportOnce(server.base, BENCH_KEY, small.slug, { html: true })).bytes;
      peakSmall = await server.peakRss();
      s1 = await throughput(server, db, large, plan);
      add(s1);
      log('3. time to first byte');
      add(await timeToFirstByte(server, small, large, plan));
    } finally {
      await server.stop();
    }
    add(await withoutWorkers(db.url, large, s1.copyHtmlMs, s1.peakHtml));
    add(await memory(db.url, small, medium, peakSmall, s1.peakLarge, large));
    add(await underLoad(db.url, small, plan));
    add(await runHardening({ databaseUrl: db.url, sql: db.sql, small, medium, large, quick: plan.quick, log }));
    log('5. rewriter');
    add(await runRewriter({ quick: plan.quick }));
    log('6. encoder');
    add(await runEncoder({ quick: plan.quick }));
    add(await runPlans({ databaseUrl: db.url, sql: db.sql, large, log }));
    if (!plan.quick) add(await runMillion({ databaseUrl: db.url, sql: db.sql, log }));
    add(await runReplica({ quick: plan.quick, log }));
    add(await runBackup({ databaseUrl: db.url, dataset: medium, runs: plan.quick ? 1 : 3, log }));
    // After scenario 10: the profile is of an export whose plans are warm.
    const prof = await profile(db.url, large);

    const report: Report = {
      quick: plan.quick,
      date: new Date().toISOString().slice(0, 10),
      machine: machineInfo(),
      postgres: version,
      database: db.where,
      durationS: (Date.now() - started) / 1000,
      data: [
        { ...small, bodyBytes: smallBytes },
        { ...medium, bodyBytes: null },
        { ...large, bodyBytes: s1.bodyBytes },
      ],
      rows,
      notes,
      profile: prof,
    };
    for (const r of rows) {
      process.stdout.write(
        `${r.met === null ? '    ' : r.met ? 'met ' : 'MISS'} ${r.scenario} | ${r.what} | ${r.baseline} | ${r.measured} | ${fmt(r.ratio, 2)}× (${r.target})\n`,
      );
    }
    if (opts.write) {
      const file = path.join(BENCH_SRC, plan.quick ? 'RESULTS.quick.md' : 'RESULTS.md');
      await writeReport(file, path.join(BENCH_SRC, 'optimisations.md'), report);
      log(`wrote ${file}`);
    }
    log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await agent.close();
    await db.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
