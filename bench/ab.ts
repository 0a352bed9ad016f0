/**
 * A/B of two builds of the server on the same data, runs alternating, each against a COPY of the
 * same rows measured beside it (issue 43): `node dist/bench/ab.js --old /path/to/other/checkout`.
 * Both checkouts must be built (`npm run build`); each build's own bench/lib/server-process.js starts
 * its server, so each runs its own code with its own shebang's flags. Per export: wall time, the
 * server's CPU and the CPU of the PostgreSQL backends it is connected to (from /proc), and peak RSS.
 * Modes: `plain` (no HTML), `warm` (HTML, every rewrite plan stored), `cold` (HTML, no plan stored)
 * and `changed` (HTML, warm but for 1 % of the documents edited before each export, a different 1 %
 * each time, as a knowledge base in use is). DATABASE_URL names the server; the data is kept in
 * kb_export_bench as for `npm run bench`. `changed` edits that kept data for good: drop
 * kb_export_bench for pristine documents again. `--sql-a` and `--sql-b` run statements before each
 * export of that side (before its plans are dropped or its documents edited), so that two states of
 * the schema can be compared on one build: `--old` the same checkout, each side its own state.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { loadConfig } from '../src/config.js';
import { SIZES } from '../src/generate/sizes.js';
import { warmPlans } from '../src/cli/warm-command.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase } from './lib/datasets.js';
import { agent, copyOnce, exportOnce, median } from './lib/http-client.js';
import type { ServerProcess, ServerOptions } from './lib/server-process.js';
import { ensureMillion, MILLION_BOOK, MILLION_SLUG } from './million.js';
import { fmt } from './result.js';
import type { Sql } from '../src/db/connect.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const TICKS_PER_S = 100;

type Mode = 'plain' | 'warm' | 'cold' | 'changed';
interface Book {
  id: string;
  slug: string;
}
interface Sample {
  ms: number;
  serverCpuS: number;
  pgCpuS: number;
  peakMb: number;
  ttfbMs: number;
  bytes: number;
}

/** utime + stime of a process, s; 0 once it is gone. */
async function cpuOf(pid: number): Promise<number> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / TICKS_PER_S;
  } catch {
    return 0;
  }
}

/** The local TCP ports of process `pid`'s sockets: its fds' socket inodes, found in /proc/net/tcp. */
async function localPorts(pid: number): Promise<Set<number>> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [])) {
    const link = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const m = /^socket:\[(\d+)\]$/.exec(link);
    if (m) inodes.add(m[1]!);
  }
  const ports = new Set<number>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of (await readFile(table, 'utf8').catch(() => '')).split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && inodes.has(f[9]!)) ports.add(parseInt(f[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}

/**
 * CPU of the PostgreSQL backends serving process `pid` (matched by its sockets' ports), s, by
 * backend pid: other clients of the same server (other benchmarks, other engineers' tests) are
 * left out.
 */
async function backendsCpu(sql: Sql, pid: number): Promise<Map<number, number>> {
  const ports = await localPorts(pid);
  const rows = await sql<{ pid: number; port: number }[]>`
    SELECT pid, client_port AS port FROM pg_stat_activity WHERE client_port IS NOT NULL`;
  const out = new Map<number, number>();
  for (const r of rows) if (ports.has(r.port)) out.set(r.pid, await cpuOf(r.pid));
  return out;
}

const sumDelta = (before: Map<number, number>, after: Map<number, number>) =>
  [...after].reduce((n, [pid, s]) => n + s - (before.get(pid) ?? 0), 0);

async function measure(server: ServerProcess, book: Book, html: boolean, sql: Sql): Promise<Sample> {
  await server.resetPeak();
  const [cpu0, pg0] = [await cpuOf(server.pid), await backendsCpu(sql, server.pid)];
  const r = await exportOnce(server.base, BENCH_KEY, book.slug, { html });
  const [cpu1, pg1] = [await cpuOf(server.pid), await backendsCpu(sql, server.pid)];
  return {
    ms: r.totalMs,
    serverCpuS: cpu1 - cpu0,
    pgCpuS: sumDelta(pg0, pg1),
    peakMb: (await server.peakRss()) / 1e6,
    ttfbMs: r.ttfbMs,
    bytes: r.bytes,
  };
}

/**
 * Edits 1 % of the book's active documents (slice `k` of a hundred, by id), through the triggers as
 * a writer's save goes, so their stored plans and export text no longer match.
 */
async function changeOnePercent(sql: Sql, bookId: string, k: number): Promise<void> {
  await sql`
    UPDATE documents SET content_html = content_html || ${`<p>Edit ${k}.</p>`}
    WHERE id IN (
      SELECT id FROM (
        SELECT id, ntile(100) OVER (ORDER BY id) AS slice FROM documents WHERE book_id = ${bookId} AND status = 1
      ) s WHERE slice = ${(k % 100) + 1}
    )`;
}

/** Drops the book's stored plans, so the next export with HTML is cold. */
async function dropPlans(sql: Sql, bookId: string): Promise<void> {
  await sql`DELETE FROM rewrite_plans WHERE document_id IN (SELECT id FROM documents WHERE book_id = ${bookId})`;
}

async function startFrom(dist: string, opts: ServerOptions): Promise<ServerProcess> {
  const mod = (await import(path.join(dist, 'bench', 'lib', 'server-process.js'))) as {
    startServer(o: ServerOptions): Promise<ServerProcess>;
  };
  return mod.startServer(opts);
}

function summary(label: string, xs: Sample[], copyMs: number): string {
  const m = (f: (s: Sample) => number) => median(xs.map(f));
  return (
    `${label}: ${fmt(m((s) => s.ms) / 1000, 2)} s = ${fmt(m((s) => s.ms) / copyMs, 2)}x COPY, ` +
    `server CPU ${fmt(
      m((s) => s.serverCpuS),
      2,
    )} s, PostgreSQL CPU ${fmt(
      m((s) => s.pgCpuS),
      2,
    )} s, ` +
    `peak ${fmt(
      m((s) => s.peakMb),
      1,
    )} MB, first byte ${fmt(
      m((s) => s.ttfbMs),
      0,
    )} ms, ${fmt(m((s) => s.bytes) / 1e6, 1)} MB`
  );
}

async function main(): Promise<void> {
  const program = new Command()
    .requiredOption('--old <checkout>', 'the other checkout (built), the "A" of the comparison')
    .option(
      '--book <name>',
      'medium, large (as npm run bench has them), million, or a number of generated documents',
      'medium',
    )
    .option('--mode <mode>', 'plain, warm, cold or changed', 'plain')
    .option('--runs <n>', 'runs of each build', '3')
    .option('--sql-a <statements>', 'SQL run before each export of A (e.g. a constraint added)')
    .option('--sql-b <statements>', 'SQL run before each export of B')
    .parse();
  const o = program.opts<{ old: string; book: string; mode: Mode; runs: string; sqlA?: string; sqlB?: string }>();
  const before = { A: o.sqlA, B: o.sqlB };
  const db = await openBenchDatabase();
  const log = (l: string) => process.stderr.write(`[ab] ${l}\n`);
  try {
    let book: Book;
    if (o.book === 'million') {
      await ensureMillion(db.sql, log);
      book = { id: MILLION_BOOK, slug: MILLION_SLUG };
    } else {
      const named = o.book === 'medium' || o.book === 'large';
      const n = named ? SIZES[o.book as 'medium' | 'large'] : Number(o.book);
      const d = await ensureDataset(db.sql, named ? o.book : `ab-${n}`, n, log);
      book = { id: d.bookId, slug: d.slug };
    }
    const html = o.mode !== 'plain';
    if (o.mode === 'warm' || o.mode === 'changed')
      await warmPlans(loadConfig({ ...process.env, DATABASE_URL: db.url, REWRITE_WORKERS: '1' }), db.sql, {
        book: book.slug,
      });
    const env = { EXPORT_CACHE_BYTES: '0' };
    const servers = {
      A: await startFrom(path.resolve(o.old, 'dist'), { databaseUrl: db.url, env, coverage: false }),
      B: await startFrom(path.resolve(HERE, '..'), { databaseUrl: db.url, env, coverage: false }),
    };
    const samples: Record<'A' | 'B', Sample[]> = { A: [], B: [] };
    const copies: number[] = [];
    let edits = 0;
    try {
      for (const s of Object.values(servers)) await exportOnce(s.base, BENCH_KEY, book.slug, { html });
      for (let i = 0; i < Number(o.runs); i++) {
        copies.push((await copyOnce(db.url, book.id, html)).totalMs);
        for (const side of i % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const)) {
          const statements = before[side];
          if (statements !== undefined) await db.sql.unsafe(statements);
          if (o.mode === 'cold') await dropPlans(db.sql, book.id);
          if (o.mode === 'changed') await changeOnePercent(db.sql, book.id, edits++);
          const s = await measure(servers[side], book, html, db.sql);
          samples[side].push(s);
          log(
            `run ${i + 1} ${side}: ${fmt(s.ms / 1000, 2)} s, server ${fmt(s.serverCpuS, 2)} s, pg ${fmt(s.pgCpuS, 2)} s`,
          );
        }
      }
    } finally {
      await Promise.all(Object.values(servers).map((s) => s.stop()));
    }
    const c = median(copies);
    const lines = [
      `${o.book} ${o.mode}, ${o.runs} alternating runs; COPY of the same rows ${fmt(c / 1000, 2)} s (median)`,
      summary('A (old)', samples.A, c),
      summary('B (new)', samples.B, c),
      `B/A wall ${fmt(median(samples.B.map((s) => s.ms)) / median(samples.A.map((s) => s.ms)), 3)}`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await agent.close();
    await db.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`ab: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
