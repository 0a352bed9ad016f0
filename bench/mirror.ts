/**
 * `kb-export mirror` on real documentation: pages per second and peak RSS of a first mirror, of
 * later runs (nothing changed; a few pages changed), of the HTML format, against the baseline
 * measured in the same run: a plain `kb-export backup` of the same book (the export downloaded,
 * verified and written), which every mirror run does before it writes pages.
 *
 * `npm run build && node dist/bench/mirror.js [--source=DIR] [--rounds=N] [--changed=N] [--shot=FILE]`.
 * The source is a folder of HTML pages, by default the PostgreSQL manual of Debian's
 * postgresql-doc-15 (1,100+ pages), imported with `kb-export import-html`. Every command is the
 * shipped executable as a child process (its VmHWM read at exit, bench/lib/cli-process.ts); medians
 * of N rounds (default 3). With `--shot=FILE`, headless Chromium's screenshot of one page of the
 * HTML mirror is written to FILE. With DATABASE_URL, a throw-away database
 * `kb_export_bench_mirror` there, otherwise an embedded PostgreSQL. Prints a Markdown table.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { benchDatabase } from './lib/bench-database.js';
import { runCli, type CliRun } from './lib/cli-process.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';

const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const SOURCE = arg('source', '/usr/share/doc/postgresql-doc-15/html');
const ROUNDS = Number(arg('rounds', '3'));
const CHANGED = Number(arg('changed', '10'));
const SHOT = arg('shot', '');
const KEY = 'kbx_bench_mirror';
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;

async function must(args: string[], env: Record<string, string>): Promise<CliRun> {
  const r = await runCli(args, env);
  if (r.code !== 0) throw new Error(`kb-export ${args[0]} exited with ${r.code}: ${r.stderr}`);
  return r;
}

/** Median seconds and highest peak RSS of `rounds` runs, `prepare` before each (not timed). */
async function measure(
  rounds: number,
  prepare: (round: number) => Promise<void>,
  args: (round: number) => string[],
  env: Record<string, string>,
): Promise<{ seconds: number; peak: number }> {
  const seconds: number[] = [];
  let peak = 0;
  for (let r = 0; r < rounds; r++) {
    await prepare(r);
    const run = await must(args(r), env);
    seconds.push(run.seconds);
    peak = Math.max(peak, run.peakRss);
  }
  return { seconds: median(seconds), peak };
}

async function pagesIn(dir: string, ext: string): Promise<number> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  // SUMMARY.md and the top index.html list the pages; they are none.
  const top = (e: { name: string; parentPath: string }) =>
    path.resolve(e.parentPath) === path.resolve(dir) && ['SUMMARY.md', 'index.html'].includes(e.name);
  return entries.filter((e) => e.isFile() && e.name.endsWith(ext) && !e.parentPath.includes('.kb-export') && !top(e))
    .length;
}

try {
  await stat(SOURCE);
} catch {
  process.stderr.write(`${SOURCE} is missing: apt-get install postgresql-doc-15, or pass --source=DIR\n`);
  process.exit(2);
}

const work = await mkdtemp(path.join(os.tmpdir(), 'kb-export-bench-mirror-'));
const db = await benchDatabase('kb_export_bench_mirror');
const dbEnv = { DATABASE_URL: db.url };
try {
  await must(['migrate'], dbEnv);
  const seedFile = path.join(work, 'owner.json');
  await writeFile(
    seedFile,
    JSON.stringify({ users: [{ id: 'u-bench', name: 'Bench', apiKeys: [{ id: 'k-bench', key: KEY }] }], books: [] }),
  );
  await must(['load', seedFile], dbEnv);
  await must(['import-html', SOURCE, '--owner', 'u-bench', '--slug', 'manual', '--name', 'PostgreSQL manual'], dbEnv);
  const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0' } });
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  try {
    const env = { KB_EXPORT_API_KEY: KEY };
    const common = ['--server', server.base, '--book', 'manual', '--quiet'];
    const fresh = (name: string) => async (r: number) =>
      rm(path.join(work, `${name}-${r}`), { recursive: true, force: true });
    const backup = await measure(
      ROUNDS,
      async (r) => {
        await fresh('backup')(r);
        await mkdir(path.join(work, `backup-${r}`));
      },
      (r) => [
        'backup',
        ...common,
        '--out',
        path.join(work, `backup-${r}`, 'manual.ndjson'),
        '--format',
        'ndjson',
        '--include-categories',
      ],
      env,
    );
    const first = await measure(
      ROUNDS,
      fresh('md'),
      (r) => ['mirror', ...common, '--out', path.join(work, `md-${r}`)],
      env,
    );
    const pages = await pagesIn(path.join(work, 'md-0'), '.md');
    const again = await measure(
      ROUNDS,
      async () => {},
      () => ['mirror', ...common, '--out', path.join(work, 'md-0')],
      env,
    );
    const changed = await measure(
      ROUNDS,
      async (r) => {
        await sql`UPDATE documents SET content_html = content_html || ${`<p>edit ${r}</p>`}
          WHERE id IN (SELECT id FROM documents WHERE type = 'document' ORDER BY id LIMIT ${CHANGED})`;
      },
      () => ['mirror', ...common, '--out', path.join(work, 'md-0')],
      env,
    );
    const html = await measure(
      ROUNDS,
      fresh('html'),
      (r) => ['mirror', ...common, '--format', 'html', '--out', path.join(work, `html-${r}`)],
      env,
    );
    if (SHOT !== '') {
      const page = path.join(work, 'html-0', 'sql-select.html');
      await promisify(execFile)('chromium', [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        `--screenshot=${SHOT}`,
        '--window-size=1000,760',
        pathToFileURL(page).href,
      ]);
    }
    const row = (what: string, m: { seconds: number; peak: number }, n: number | null) =>
      `| ${what} | ${m.seconds.toFixed(2)} s | ${n === null ? '–' : `${Math.round(n / m.seconds)} pages/s`} | ${mib(m.peak)} | ${(m.seconds / backup.seconds).toFixed(2)}× |`;
    const m = machineInfo();
    process.stdout.write(
      `Run on ${new Date().toISOString().slice(0, 10)}: ${m.cpu}, ${m.cores} cores, Node.js ${m.node}, ${db.where}; source ${SOURCE} (${pages} pages); medians of ${ROUNDS} runs, each the executable from start to exit.\n\n` +
        '| Run | Time | Pages per second | Peak RSS | Time against the baseline |\n|---|---:|---:|---:|---:|\n' +
        `${row('baseline: `backup --format ndjson --include-categories` of the same book', backup, pages)}\n` +
        `${row('`mirror`, first run (Markdown)', first, pages)}\n` +
        `${row('`mirror` again, nothing changed (a delta of nothing)', again, null)}\n` +
        `${row(`\`mirror\` again, ${CHANGED} pages changed`, changed, null)}\n` +
        `${row('`mirror --format html`, first run', html, pages)}\n`,
    );
  } finally {
    await sql.end();
    await server.stop();
  }
} finally {
  await db.stop();
  await rm(work, { recursive: true, force: true });
}
