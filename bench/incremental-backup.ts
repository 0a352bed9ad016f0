/**
 * `npm run build && node dist/bench/incremental-backup.js [--size medium|large|small] [--runs N]`:
 * `kb-export backup --incremental` after 10 changes (renames, HTML changes, one document created,
 * one deleted) against a full `kb-export backup` of the same knowledge base in the same run, each
 * run timed as the shipped executable with its peak RSS (bench/lib/cli-process.ts), the two
 * alternating, for a plain JSON file and a `.json.gz` one. After each pair the merged file must
 * decompress to the full backup's bytes (the run fails otherwise). The knowledge base is a generated
 * one of its own (`incremental-SIZE`, bench/lib/datasets.ts), since the bench writes to it; the
 * server is bench/server.ts with its export cache off, so every request streams. Prints Markdown.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { documentsForSize } from '../src/generate/sizes.js';
import { runCli, type CliRun } from './lib/cli-process.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase } from './lib/datasets.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';

const arg = (name: string, fallback: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : fallback;
const size = arg('--size', 'medium');
const runs = Number(arg('--runs', '3'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (line: string) => process.stderr.write(`[incremental-backup] ${line}\n`);

const db = await openBenchDatabase();
const dataset = await ensureDataset(db.sql, `incremental-${size}`, documentsForSize(size), log);
const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0' } });
const dir = mkdtempSync(path.join(os.tmpdir(), 'kb-export-bench-incremental-'));
// The knowledge base is reused from run to run (with the earlier runs' changes): ids made now are new.
const stamp = Date.now().toString(36);
let created = 0;

/** 10 changes: 4 renames, 4 HTML changes, one document created, one deleted. */
async function tenChanges(run: number): Promise<void> {
  const ids = await db.sql<{ id: string }[]>`
    SELECT id FROM documents d WHERE book_id = ${dataset.bookId} AND status = 1 AND type <> 'category'
      AND NOT EXISTS (SELECT 1 FROM documents c WHERE c.parent_id = d.id)
    ORDER BY md5(id || ${String(run)}) LIMIT 9`;
  for (const { id } of ids.slice(0, 4)) await db.sql`UPDATE documents SET name = name || ' (renamed)' WHERE id = ${id}`;
  for (const { id } of ids.slice(4, 8))
    await db.sql`UPDATE documents SET content_html = content_html || '<p>edited</p>' WHERE id = ${id}`;
  await db.sql`DELETE FROM documents WHERE id = ${ids[8]!.id}`;
  const id = `${dataset.bookId}-${stamp}-${run}-${created++}`;
  await db.sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
    VALUES (${id}, ${dataset.bookId}, ${id}, 'Created by the bench', 'document', 'a0', 1, '<p>new</p>')`;
}

const plain = (file: string) => (file.endsWith('.gz') ? zlib.gunzipSync(readFileSync(file)) : readFileSync(file));

try {
  const rows: string[] = [];
  let jsonBytes = 0;
  for (const name of ['backup.json', 'backup.json.gz']) {
    const file = path.join(dir, name);
    const full = path.join(dir, `full-${name}`);
    const backup = async (out: string, extra: string[]): Promise<CliRun> => {
      const r = await runCli(['backup', '--server', server.base, '--book', dataset.slug, '--out', out, ...extra], {
        KB_EXPORT_API_KEY: BENCH_KEY,
      });
      if (r.code !== 0) throw new Error(`backup exited ${r.code}: ${r.stderr}`);
      return r;
    };
    log(`${name}: the first incremental backup (a full one)`);
    await backup(file, ['--incremental']);
    const inc: CliRun[] = [];
    const whole: CliRun[] = [];
    let deltaBytes = 0;
    for (let i = 0; i < runs; i++) {
      await tenChanges(i);
      // Alternating which goes first; nothing is written between the two.
      const pair =
        i % 2 === 0
          ? [await backup(file, ['--incremental']), await backup(full, [])]
          : [await backup(full, []), await backup(file, ['--incremental'])].reverse();
      const [a, b] = pair as [CliRun, CliRun];
      const m =
        /merged .*: \d+ documents, (\d+) bytes .* from a delta of 1?\d changed or new and [01] removed \((\d+) bytes\)/.exec(
          a.stderr,
        );
      if (m === null) throw new Error(`not a merge of 10 changes: ${a.stderr}`);
      jsonBytes = Number(m[1]);
      deltaBytes = Number(m[2]);
      if (!plain(file).equals(plain(full))) throw new Error(`${name}: the merged file differs from the full backup`);
      inc.push(a);
      whole.push(b);
      log(`${name}, run ${i + 1}/${runs}: incremental ${a.seconds.toFixed(2)} s, full ${b.seconds.toFixed(2)} s`);
    }
    const s = (xs: CliRun[]) => median(xs.map((x) => x.seconds));
    const peak = (xs: CliRun[]) => `${(Math.max(...xs.map((x) => x.peakRss)) / 2 ** 20).toFixed(0)} MB`;
    rows.push(
      `| ${name} | ${s(whole).toFixed(2)} s, ${peak(whole)} | ${s(inc).toFixed(2)} s, ${peak(inc)}, ${(deltaBytes / 1e3).toFixed(0)} kB of delta | ${(s(inc) / s(whole)).toFixed(2)}× |`,
    );
  }
  const m = machineInfo();
  console.log(`## An incremental backup after 10 changes against a full one (bench/incremental-backup.ts)\n`);
  console.log(
    `${m.cpu}, ${m.cores} cores, Node.js ${m.node}; a generated knowledge base of ${documentsForSize(size).toLocaleString('en')} documents (\`${size}\`), ${dataset.exported.toLocaleString('en')} exported, ${(jsonBytes / 1e6).toFixed(0)} MB of JSON; median of ${runs} runs, the two alternating; peak RSS the highest of the runs.\n`,
  );
  console.log(
    '| File | full `backup` (baseline), peak RSS | `backup --incremental` after 10 changes, peak RSS | × full time |',
  );
  console.log('|---|---:|---:|---:|');
  for (const r of rows) console.log(r);
} finally {
  rmSync(dir, { recursive: true, force: true });
  await server.stop();
  await db.close();
}
