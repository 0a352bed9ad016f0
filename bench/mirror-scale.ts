/**
 * `kb-export mirror` on a generated book of N documents with no content (no page to convert, so
 * what is measured is the tree index, the page files and the run's bookkeeping): peak RSS and
 * pages per second of a first mirror and of a run with nothing changed, for this build and, with
 * `--against=NAME=FILE`, other builds' executables (a baseline) in the same run, rounds interleaved.
 *
 * `npm run build && node dist/bench/mirror-scale.js [--documents=N] [--rounds=N] [--against=NAME=FILE]…`.
 * The documents: one category per 1,000 at the top, each document in one of them. With
 * DATABASE_URL, a throw-away database `kb_export_bench_mirror_scale` there, otherwise an embedded
 * PostgreSQL. Prints a Markdown table; medians of the rounds, the highest peak.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { benchDatabase } from './lib/bench-database.js';
import { cliPath, runCli, type CliRun } from './lib/cli-process.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const DOCUMENTS = Number(arg('documents', '100000'));
const ROUNDS = Number(arg('rounds', '3'));
/** Other builds' executables, `--against=NAME=FILE` each (NAME without `=`). */
const AGAINST = process.argv
  .filter((a) => a.startsWith('--against='))
  .map((a) => a.slice('--against='.length).split(/=(.*)/s).slice(0, 2) as [string, string]);
const KEY = 'kbx_bench_scale';
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function must(args: string[], env: Record<string, string>, cli?: string): Promise<CliRun> {
  const r = await runCli(args, env, cli);
  if (r.code !== 0) throw new Error(`kb-export ${args[0]} exited with ${r.code}: ${r.stderr}`);
  return r;
}

const work = await mkdtemp(path.join(os.tmpdir(), 'kb-export-bench-mirror-scale-'));
const db = await benchDatabase('kb_export_bench_mirror_scale');
try {
  await must(['migrate'], { DATABASE_URL: db.url });
  const seedFile = path.join(work, 'seed.json');
  await writeFile(
    seedFile,
    JSON.stringify({
      users: [{ id: 'u', name: 'Bench', apiKeys: [{ id: 'k', key: KEY }] }],
      books: [{ id: 'b', ownerId: 'u', slug: 'gen', name: 'Generated', documents: [] }],
    }),
  );
  await must(['load', seedFile], { DATABASE_URL: db.url });
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  const categories = Math.max(1, Math.ceil(DOCUMENTS / 1000));
  await sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, parent_id)
    SELECT 'c' || i, 'b', 'part-' || i, 'Part ' || i, 'category', lpad(i::text, 8, '0'), 1, NULL
    FROM generate_series(1, ${categories}) i`);
  await sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, parent_id)
    SELECT 'd' || i, 'b', 'page-' || i, 'Page ' || i, 'document', lpad(i::text, 8, '0'), 1, 'c' || (1 + i % ${categories})
    FROM generate_series(1, ${DOCUMENTS - categories}) i`);
  await sql.end();
  const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0' } });
  try {
    const builds: [string, string][] = [...AGAINST, ['this build', cliPath()]];
    const results = new Map(builds.map(([name]) => [name, { first: [] as CliRun[], again: [] as CliRun[] }]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const [name, cli] of builds) {
        const out = path.join(work, `mirror-${r}-${name.replace(/ /g, '-')}`);
        const args = ['mirror', '--server', server.base, '--book', 'gen', '--out', out, '--quiet'];
        results.get(name)!.first.push(await must(args, { KB_EXPORT_API_KEY: KEY }, cli));
        results.get(name)!.again.push(await must(args, { KB_EXPORT_API_KEY: KEY }, cli));
        await rm(out, { recursive: true, force: true });
      }
    }
    const m = machineInfo();
    let table =
      `Run on ${new Date().toISOString().slice(0, 10)}: ${m.cpu}, ${m.cores} cores, Node.js ${m.node}, ${db.where}; ${DOCUMENTS} documents; medians of ${ROUNDS} rounds.\n\n` +
      '| Build | Run | Time | Pages per second | Peak RSS (highest) |\n|---|---|---:|---:|---:|\n';
    for (const [name, runs] of results) {
      for (const [what, list] of [
        ['first run', runs.first],
        ['again, nothing changed', runs.again],
      ] as const) {
        const s = median(list.map((x) => x.seconds));
        const peak = Math.max(...list.map((x) => x.peakRss));
        table += `| ${name} | ${what} | ${s.toFixed(1)} s | ${Math.round(DOCUMENTS / s)} | ${(peak / 2 ** 20).toFixed(0)} MB |\n`;
      }
    }
    process.stdout.write(table);
  } finally {
    await server.stop();
  }
} finally {
  await db.stop();
  await rm(work, { recursive: true, force: true });
}
