/**
 * Scenario 13 (issue 21), and `npm run build && node dist/bench/backup.js [--size large|medium|small]
 * [--runs N]` alone: `kb-export backup` against `curl -o` of the same export from the same server in
 * the same run (curl is the baseline: what people run without this client), once per way the file
 * can be written:
 * - plain JSON: neither asks for compression (the client's default for a plain file); the client
 *   verifies, hashes and writes the JSON as it arrives;
 * - `.json.gz`, `.json.br` (and `.json.zst` where the runtime has zstd): curl asks for that
 *   Content-Encoding and writes the compressed bytes as they arrive; the client asks for the same,
 *   writes the server's bytes as they arrive and verifies a decompressed copy beside them.
 * The curl runs also give scenario 13's compressed exports against the identity export.
 * Each the median of N runs (default 3), curl and the client alternating, with the client's peak
 * RSS (VmHWM of its process, read from /proc while it runs), run as the `kb-export` executable (its
 * shebang's runtime flags apply). The client also verifies every byte and fsyncs. The server is
 * bench/server.ts on the benchmark database (bench/lib/datasets.ts), the same as `npm run bench`,
 * with its export cache off, so every request streams.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import { documentsForSize } from '../src/generate/sizes.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase, type Dataset } from './lib/datasets.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';
import { fmt, type ResultRow, type ScenarioResult } from './result.js';

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli/kb-export.js');

interface Measured {
  ms: number;
  peakRssBytes: number;
  stderr: string;
}

/** Runs `cmd`, reading its VmHWM from /proc until it exits; rejects on a non-zero exit. */
function measure(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<Measured> {
  const started = performance.now();
  const child = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  let peak = 0;
  const poll = setInterval(() => {
    try {
      const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      if (m) peak = Math.max(peak, Number(m[1]) * 1024);
    } catch {
      // gone between the check and the read
    }
  }, 50);
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => {
      clearInterval(poll);
      if (code === 0) resolve({ ms: performance.now() - started, peakRssBytes: peak, stderr });
      else reject(new Error(`${cmd} exited ${code}: ${stderr}`));
    });
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const hasZstd = typeof (zlib as { createZstdDecompress?: unknown }).createZstdDecompress === 'function';

interface Scenario {
  label: string;
  /** The Content-Encoding curl asks for, or null for none. */
  encoding: string | null;
  file: string;
}

const SCENARIOS: Scenario[] = [
  { label: 'plain JSON', encoding: null, file: 'backup.json' },
  { label: 'gzip (.json.gz)', encoding: 'gzip', file: 'backup.json.gz' },
  { label: 'brotli (.json.br)', encoding: 'br', file: 'backup.json.br' },
  ...(hasZstd ? [{ label: 'zstd (.json.zst)', encoding: 'zstd', file: 'backup.json.zst' }] : []),
];

interface BackupFigures {
  scenario: Scenario;
  fileBytes: number;
  curl: Measured[];
  client: Measured[];
}

/** `runs` alternating curl and backup runs of each way a file is written; the JSON's bytes as the client counted them. */
async function measureBackups(
  databaseUrl: string,
  dataset: Dataset,
  runs: number,
  log: (line: string) => void,
): Promise<{ figures: BackupFigures[]; jsonBytes: number }> {
  const server = await startServer({ databaseUrl, env: { EXPORT_CACHE_BYTES: '0' } });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kb-export-bench-backup-'));
  try {
    const url = `${server.base}/api/v1/open/books/${dataset.slug}/docs`;
    const figures: BackupFigures[] = [];
    let jsonBytes = 0;
    for (const s of SCENARIOS) {
      log(`13. backup to ${s.file}, ${runs} run(s) against curl`);
      const f: BackupFigures = { scenario: s, fileBytes: 0, curl: [], client: [] };
      for (let i = 0; i < runs; i++) {
        const curlOut = path.join(dir, `curl-${s.file}`);
        const headers = [
          '-H',
          `Authorization: Bearer ${BENCH_KEY}`,
          ...(s.encoding ? ['-H', `Accept-Encoding: ${s.encoding}`] : []),
        ];
        f.curl.push(await measure('curl', ['-sf', '-o', curlOut, ...headers, url], process.env));
        const curlBytes = statSync(curlOut).size;
        const run = await measure(
          CLI,
          ['backup', '--server', server.base, '--book', dataset.slug, '--out', path.join(dir, s.file)],
          {
            ...process.env,
            KB_EXPORT_API_KEY: BENCH_KEY,
          },
        );
        f.client.push(run);
        f.fileBytes = statSync(path.join(dir, s.file)).size;
        // The compressed backups must be the server's bytes, not the client's own compression.
        if (s.encoding !== null && !run.stderr.includes(`${s.encoding} as the server sent it`))
          throw new Error(`${s.file} was not written as sent: ${run.stderr}`);
        const m = / (\d+) bytes/.exec(run.stderr.split('\n').filter((l) => l.startsWith('wrote '))[0] ?? '');
        if (m) jsonBytes = Number(m[1]);
        if (s.encoding === null && f.fileBytes !== curlBytes)
          throw new Error('the backup and curl wrote different sizes');
      }
      figures.push(f);
    }
    return { figures, jsonBytes };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await server.stop();
  }
}

const peak = (xs: Measured[]) => `${(Math.max(...xs.map((x) => x.peakRssBytes)) / 2 ** 20).toFixed(1)} MB`;

/** Scenario 13: each backup against curl of the same export (targets: ≤ 1.2× plain, ≤ 1.3× compressed). */
export async function run(opts: {
  databaseUrl: string;
  dataset: Dataset;
  runs: number;
  log: (line: string) => void;
}): Promise<ScenarioResult> {
  const { figures, jsonBytes } = await measureBackups(opts.databaseUrl, opts.dataset, opts.runs, opts.log);
  const rows: ResultRow[] = figures.map(({ scenario: s, fileBytes, curl, client }) => {
    const [c, b] = [median(curl.map((x) => x.ms)), median(client.map((x) => x.ms))];
    const compressed = s.encoding !== null;
    return {
      scenario: '13. Backup',
      what: `kb-export backup of ${opts.dataset.name} (${fmt(jsonBytes / 1e6)} MB of JSON) to ${s.label}, ${fmt(fileBytes / 1e6)} MB; client peak RSS ${peak(client)}`,
      baseline: `curl -o of the same export${compressed ? `, Content-Encoding ${s.encoding}` : ''} ${fmt(c / 1000, 2)} s`,
      measured: `${fmt(b / 1000, 2)} s`,
      ratio: b / c,
      target: compressed ? '≤ 1.3×' : '≤ 1.2×',
      met: compressed ? b / c <= 1.3 : b / c <= 1.2,
    };
  });
  // The curl runs are the exports themselves: what compression costs the server against the identity body.
  const identity = figures.find((f) => f.scenario.encoding === null);
  if (identity !== undefined) {
    const plain = median(identity.curl.map((x) => x.ms));
    for (const f of figures.filter((x) => x.scenario.encoding !== null)) {
      const compressed = median(f.curl.map((x) => x.ms));
      rows.push({
        scenario: '13. Compressed export',
        what: `curl -o of ${opts.dataset.name}'s export with Content-Encoding ${f.scenario.encoding} (${fmt(f.fileBytes / 1e6)} MB for ${fmt(jsonBytes / 1e6)} MB of JSON), compressed by the server on libuv's threads`,
        baseline: `the identity export ${fmt(plain / 1000, 2)} s`,
        measured: `${fmt(compressed / 1000, 2)} s`,
        ratio: compressed / plain,
        target: '',
        met: null,
      });
    }
  }
  return {
    rows,
    notes: [
      `13: median of ${opts.runs} alternating run(s) of curl and of the \`kb-export\` executable, each its own process, against the same server (export cache off); ` +
        'a compressed backup writes the bytes the server sent and verifies a decompressed copy beside them; the plain JSON one gets the identity body, as curl does, and verifies and hashes it as it writes. ' +
        'Every backup verifies its export and fsyncs its file.',
    ],
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string, fallback: string) =>
    process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : fallback;
  const size = arg('--size', 'large');
  const runs = Number(arg('--runs', '3'));
  const db = await openBenchDatabase();
  try {
    const log = (l: string) => process.stderr.write(`${l}\n`);
    const dataset = await ensureDataset(db.sql, size, documentsForSize(size), log);
    const { figures, jsonBytes } = await measureBackups(db.url, dataset, runs, log);
    const mbs = (ms: number) => (jsonBytes / 1e6 / (ms / 1000)).toFixed(1);
    const m = machineInfo();
    console.log(`## kb-export backup against curl -o (bench/backup.ts)\n`);
    console.log(
      `${m.cpu}, ${m.cores} cores, Node.js ${m.node}; the \`${size}\` knowledge base, ${dataset.exported} documents, ${(jsonBytes / 1e6).toFixed(0)} MB of JSON; median of ${runs} alternating runs; peak RSS the highest of the runs.\n`,
    );
    console.log(
      '| File | Size on disk | curl -o of the same export (baseline), peak RSS | kb-export backup, peak RSS | × curl time |',
    );
    console.log('|---|---:|---:|---:|---:|');
    for (const { scenario: s, fileBytes, curl, client } of figures) {
      const [c, b] = [median(curl.map((x) => x.ms)), median(client.map((x) => x.ms))];
      console.log(
        `| ${s.label} | ${(fileBytes / 1e6).toFixed(1)} MB | ${(c / 1000).toFixed(1)} s (${mbs(c)} MB/s of JSON), ${peak(curl)} | ${(b / 1000).toFixed(1)} s (${mbs(b)} MB/s of JSON), ${peak(client)} | ${(b / c).toFixed(2)}× |`,
      );
    }
  } finally {
    await db.close();
  }
}
