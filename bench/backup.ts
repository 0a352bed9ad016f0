/**
 * `npm run build && node dist/bench/backup.js [--size large|medium|small]`: `kb-export backup`
 * against `curl -o` of the same export from the same server in the same run (curl is the
 * baseline: what people run without this client), each the median of 3 runs, alternating, and the
 * client's peak RSS (VmHWM of its process, read from /proc while it runs), run as the `kb-export`
 * executable (its shebang's runtime flags apply). Both write to a local
 * file; the client also parses and verifies every byte, and fsyncs. The server is bench/server.ts
 * on the benchmark database (bench/lib/datasets.ts), the same as `npm run bench`.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { documentsForSize } from '../src/generate/sizes.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase } from './lib/datasets.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli.js');
const size = process.argv.includes('--size') ? process.argv[process.argv.indexOf('--size') + 1]! : 'large';

interface Measured {
  ms: number;
  peakRssBytes: number;
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
      if (code === 0) resolve({ ms: performance.now() - started, peakRssBytes: peak });
      else reject(new Error(`${cmd} exited ${code}: ${stderr}`));
    });
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const db = await openBenchDatabase();
const dataset = await ensureDataset(db.sql, size, documentsForSize(size), (l) => process.stderr.write(`${l}\n`));
const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0' } });
const dir = mkdtempSync(path.join(os.tmpdir(), 'kb-export-bench-backup-'));
try {
  const url = `${server.base}/api/v1/open/books/${dataset.slug}/docs`;
  const curl: Measured[] = [];
  const client: Measured[] = [];
  let bytes = 0;
  for (let i = 0; i < 3; i++) {
    curl.push(await measure('curl', ['-sf', '-o', path.join(dir, 'curl.json'), '-H', `Authorization: Bearer ${BENCH_KEY}`, url], process.env));
    client.push(
      await measure(CLI, ['backup', '--server', server.base, '--book', dataset.slug, '--out', path.join(dir, 'backup.json'), '--quiet'], {
        ...process.env,
        KB_EXPORT_API_KEY: BENCH_KEY,
      }),
    );
    bytes = statSync(path.join(dir, 'backup.json')).size;
    if (bytes !== statSync(path.join(dir, 'curl.json')).size) throw new Error('the backup and curl wrote different sizes');
  }
  const m = machineInfo();
  const mbs = (ms: number) => (bytes / 1e6 / (ms / 1000)).toFixed(1);
  const c = median(curl.map((x) => x.ms));
  const b = median(client.map((x) => x.ms));
  console.log(`## kb-export backup against curl -o (bench/backup.ts)\n`);
  console.log(`${m.cpu}, ${m.cores} cores, Node.js ${m.node}; the \`${size}\` knowledge base, ${dataset.exported} documents, ${(bytes / 1e6).toFixed(0)} MB of JSON; median of 3 alternating runs.\n`);
  console.log('| Client | Time | MB/s | × curl time | Peak RSS of the client |');
  console.log('|---|---:|---:|---:|---:|');
  console.log(`| curl -o (baseline) | ${(c / 1000).toFixed(1)} s | ${mbs(c)} | 1.00 | ${(median(curl.map((x) => x.peakRssBytes)) / 2 ** 20).toFixed(1)} MB |`);
  console.log(`| kb-export backup | ${(b / 1000).toFixed(1)} s | ${mbs(b)} | ${(b / c).toFixed(2)} | ${(Math.max(...client.map((x) => x.peakRssBytes)) / 2 ** 20).toFixed(1)} MB (highest of the runs) |`);
} finally {
  rmSync(dir, { recursive: true, force: true });
  await server.stop();
  await db.close();
}
