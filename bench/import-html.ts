/**
 * `kb-export import-html` on real documentation: its speed as a ratio against reading the same
 * files and running the tokenizer over them alone (the floor of any reader built on it), measured
 * in the same run, and its peak RSS.
 *
 * `npm run build && node dist/bench/import-html.js [--source=DIR] [--copies=N] [--pages=N] [--rounds=N]`. The
 * source is a folder of HTML pages, by default the PostgreSQL manual of Debian's postgresql-doc-15
 * (1,100+ pages, 18 MB). From it, in a temporary folder:
 * - manual: N copies of the source (default 6), so start-up weighs little;
 * - logo: the same with an `<img>` in each page's header, as static-site generators put a logo in
 *   every sidebar: every page then also goes through the media URL rewrite;
 * - 10 MB pages: N pages (default 4) each made of the bodies of consecutive pages of the source,
 *   about 10 MB of real markup.
 * For each: the baseline (files read and decoded, tokenizer with its tag events, in this process),
 * the reading alone (scanHtmlCorpus, in this process), what the reader did before (a parse5
 * tree of each page, in this process, once), and import-html end to end (the executable as a
 * child process, through its shebang, into a database; its VmHWM read from /proc at its exit).
 * After a warm-up, N rounds (default 3) take turns baseline, reading, import; medians are shown,
 * and the highest peak RSS. MB are bytes of the files. With DATABASE_URL, a throw-away database `kb_export_bench_import` there;
 * otherwise a throw-away embedded PostgreSQL. Prints a Markdown table (bench/RESULTS.md keeps one).
 */
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parse } from 'parse5';
import postgres from 'postgres';
import { benchDatabase } from './lib/bench-database.js';
import { SyncSaxParser } from '../src/export/rewrite/rewriter/html-tokenizer.js';
import { scanHtmlCorpus } from '../src/import/html-corpus.js';
import { runCli } from './lib/cli-process.js';
import { machineInfo } from './machine.js';

const MB = 1e6;
const arg = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const SOURCE = arg('source', '/usr/share/doc/postgresql-doc-15/html');
const COPIES = Number(arg('copies', '6'));
const PAGES = Number(arg('pages', '4'));
const ROUNDS = Number(arg('rounds', '3'));
const PAGE_BYTES = 10 * 1024 * 1024;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Every .html/.htm file below `dir`, sorted. */
async function htmlFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && /\.html?$/i.test(e.name))
    .map((e) => path.join(e.parentPath, e.name))
    .sort();
}

async function bytesOf(files: string[]): Promise<number> {
  let n = 0;
  for (const f of files) n += (await stat(f)).size;
  return n;
}

const decode = async (file: string) => new TextDecoder('utf-8').decode(await readFile(file));

/** The baseline: each file read and decoded, then tokenized with start and end tag events. */
async function tokenizeAlone(files: string[]): Promise<number> {
  const t0 = performance.now();
  for (const f of files) {
    const sax = new SyncSaxParser(() => {});
    sax.on('endTag', () => {});
    sax.tokenize(await decode(f), true);
  }
  return (performance.now() - t0) / 1000;
}

async function scanAlone(dir: string): Promise<number> {
  const t0 = performance.now();
  for await (const doc of scanHtmlCorpus(dir, { bookId: 'bench' })) void doc;
  return (performance.now() - t0) / 1000;
}

async function treePerPage(files: string[]): Promise<number> {
  const t0 = performance.now();
  for (const f of files) parse(await decode(f), { sourceCodeLocationInfo: true });
  return (performance.now() - t0) / 1000;
}

/** The source's pages with `<img>` right after each `<body …>`: a logo in every header. */
async function withLogo(source: string, dest: string, copies: number): Promise<void> {
  for (let c = 0; c < copies; c++) {
    const dir = path.join(dest, `copy-${c}`);
    await mkdir(dir, { recursive: true });
    for (const f of await htmlFiles(source)) {
      const html = await readFile(f, 'utf8');
      const out = html.replace(
        /<body[^>]*>/i,
        (tag) => `${tag}<div class="sidebar"><img src="_static/logo.png" alt="logo"></div>`,
      );
      await writeFile(path.join(dir, path.relative(source, f).replaceAll(path.sep, '_')), out);
    }
  }
}

/** Pages of about 10 MB, each the bodies of consecutive source pages inside the first one's head. */
async function largePages(source: string, dest: string, pages: number): Promise<void> {
  await mkdir(dest, { recursive: true });
  const files = await htmlFiles(source);
  let next = 0;
  for (let p = 0; p < pages; p++) {
    const parts: string[] = [];
    let size = 0;
    let head = '';
    while (size < PAGE_BYTES) {
      const html = await readFile(files[next++ % files.length]!, 'utf8');
      const open = /<body[^>]*>/i.exec(html);
      const close = html.lastIndexOf('</body>');
      if (!open || close < 0) continue;
      if (head === '') head = html.slice(0, open.index + open[0].length);
      const body = html.slice(open.index + open[0].length, close);
      parts.push(body);
      size += Buffer.byteLength(body);
    }
    await writeFile(path.join(dest, `large-${p}.html`), `${head}${parts.join('\n')}</body></html>\n`);
  }
}

const rate = (bytes: number, s: number) => `${(bytes / MB / s).toFixed(1)} MB/s`;

try {
  await stat(SOURCE);
} catch {
  process.stderr.write(
    `${SOURCE} is missing: apt-get install postgresql-doc-15, or pass --source=DIR (a folder of HTML pages)\n`,
  );
  process.exit(2);
}

const work = await mkdtemp(path.join(os.tmpdir(), 'kb-export-bench-import-'));
const db = await benchDatabase('kb_export_bench_import');
try {
  const corpora: { name: string; dir: string }[] = [
    { name: `manual (${COPIES} copies)`, dir: path.join(work, 'manual') },
    { name: `logo in every page (${COPIES} copies)`, dir: path.join(work, 'logo') },
    { name: `${PAGES} pages of 10 MB`, dir: path.join(work, 'large') },
  ];
  for (let c = 0; c < COPIES; c++) await cp(SOURCE, path.join(corpora[0]!.dir, `copy-${c}`), { recursive: true });
  await withLogo(SOURCE, corpora[1]!.dir, COPIES);
  await largePages(SOURCE, corpora[2]!.dir, PAGES);

  const migrated = await runCli(['migrate'], { DATABASE_URL: db.url });
  if (migrated.code !== 0) throw new Error(`migrate: ${migrated.stderr}`);
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  await sql`INSERT INTO users (id, name) VALUES ('u-bench', 'Bench')`;
  await sql.end();

  const rows: string[] = [];
  let n = 0;
  for (const { name, dir } of corpora) {
    const files = await htmlFiles(dir);
    const bytes = await bytesOf(files);
    // Caches and JIT warmed once; each import is a fresh process, as a user runs it.
    await tokenizeAlone(files);
    await scanAlone(dir);
    const bases: number[] = [];
    const scans: number[] = [];
    const imports: number[] = [];
    let peak = 0;
    for (let r = 0; r < ROUNDS; r++) {
      bases.push(await tokenizeAlone(files));
      scans.push(await scanAlone(dir));
      const run = await runCli(['import-html', dir, '--owner', 'u-bench', '--slug', `bench-${n++}`], {
        DATABASE_URL: db.url,
      });
      if (run.code !== 0) throw new Error(`import-html: ${run.stderr}`);
      imports.push(run.seconds);
      peak = Math.max(peak, run.peakRss);
    }
    const tree = await treePerPage(files);
    const [base, scan, imported] = [median(bases), median(scans), median(imports)];
    const what = `${name}: ${files.length.toLocaleString('en-US')} pages, ${(bytes / MB).toFixed(1)} MB`;
    rows.push(
      `| ${what}, reading only (in process) | ${rate(bytes, base)} | ${rate(bytes, scan)} | ${(base / scan).toFixed(2)}× |`,
    );
    rows.push(
      `| ${what}, parse5's tree of each page alone (the first step of the reader before, in process) | ${rate(bytes, base)} | ${rate(bytes, tree)} | ${(base / tree).toFixed(2)}× |`,
    );
    rows.push(
      `| ${what}, \`import-html\` end to end (process start to exit), peak RSS ${(peak / 2 ** 20).toFixed(1)} MB | ${rate(bytes, base)} | ${rate(bytes, imported)} | ${(base / imported).toFixed(2)}× |`,
    );
    process.stderr.write(`${name} done\n`);
  }
  const m = machineInfo();
  process.stdout.write(
    `Run on ${new Date().toISOString().slice(0, 10)}: ${m.cpu}, ${m.cores} cores, Node.js ${m.node}, ${db.where}; source ${SOURCE}.\n\n` +
      '| Corpus and measurement | Baseline: files read and tokenized | kb-export | Ratio |\n|---|---:|---:|---:|\n' +
      `${rows.join('\n')}\n`,
  );
} finally {
  await db.stop();
  await rm(work, { recursive: true, force: true });
}
