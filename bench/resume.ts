/**
 * `npm run build && node dist/bench/resume.js [--documents N] [--cuts K]`: `kb-export backup` over a
 * link (a TCP proxy, test/helpers/tcp-proxy.ts) cut every 1/K of what one uncut backup moves, against
 * the same backup uncut (the baseline, in the same run) and against a client that restarts from the
 * first byte after each cut (undici, as many attempts as the resuming client made, plus ten). Bytes
 * moved are what the proxy forwarded to the client, headers included. The file written after the
 * cuts must equal the uncut one (the run fails otherwise). Both clients ask for the export compressed in
 * transit (backup --compressed), as a slow link would. Prints Markdown.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { request } from 'undici';
import { startTcpProxy } from '../test/helpers/tcp-proxy.js';
import { runCli } from './lib/cli-process.js';
import { BENCH_KEY, ensureDataset, openBenchDatabase } from './lib/datasets.js';
import { startServer } from './lib/server-process.js';
import { machineInfo } from './machine.js';

const arg = (name: string, fallback: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : fallback;
const documents = Number(arg('--documents', '5000'));
const cuts = Number(arg('--cuts', '10'));
const log = (line: string) => process.stderr.write(`[resume] ${line}\n`);

const teardowns: (() => unknown)[] = [];
const db = await openBenchDatabase();
const dataset = await ensureDataset(db.sql, `resume-${documents}`, documents, log);
const server = await startServer({ databaseUrl: db.url, env: { EXPORT_CACHE_BYTES: '0' } });
const proxy = await startTcpProxy(
  { teardown: (fn) => teardowns.push(fn) },
  { host: '127.0.0.1', port: Number(new URL(server.base).port) },
);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kb-export-bench-resume-'));
const base = `http://127.0.0.1:${proxy.port}`;
const moved = () => proxy.stats().bytesToClient;

try {
  const backup = async (file: string) => {
    const r = await runCli(
      ['backup', '--server', base, '--book', dataset.slug, '--out', file, '--compressed', '--retries', '3', '--quiet'],
      { KB_EXPORT_API_KEY: BENCH_KEY },
    );
    if (r.code !== 0) throw new Error(`backup failed: ${r.stderr}`);
    return r;
  };
  let at = moved();
  const whole = await backup(path.join(dir, 'whole.json'));
  const wholeBytes = moved() - at;
  log(`uncut: ${wholeBytes} bytes in ${whole.seconds.toFixed(1)} s`);

  const every = Math.floor(wholeBytes / cuts);
  proxy.cutEvery(every);
  at = moved();
  const cutsBefore = proxy.stats().cuts;
  const resumed = await backup(path.join(dir, 'resumed.json'));
  const resumedBytes = moved() - at;
  const resumedCuts = proxy.stats().cuts - cutsBefore;
  if (!readFileSync(path.join(dir, 'resumed.json')).equals(readFileSync(path.join(dir, 'whole.json'))))
    throw new Error('the resumed file differs from the uncut one');
  log(`resuming: ${resumedBytes} bytes, ${resumedCuts} cuts, ${resumed.seconds.toFixed(1)} s`);

  // Restarting from the first byte: every attempt is cut at the same distance, so it never ends.
  at = moved();
  const attempts = resumedCuts + 10;
  let restartedWhole = false;
  for (let i = 0; i < attempts && !restartedWhole; i++) {
    try {
      const res = await request(`${base}/api/v1/open/books/${dataset.slug}/docs`, {
        headers: { authorization: `Bearer ${BENCH_KEY}`, 'accept-encoding': 'gzip' },
      });
      // Read to the end: a cut throws here.
      for await (const chunk of res.body) void chunk;
      restartedWhole = res.statusCode === 200;
    } catch {
      // Cut: start again.
    }
  }
  const restartBytes = moved() - at;
  proxy.cutEvery(null);

  const m = machineInfo();
  const mb = (b: number) => `${(b / 1e6).toFixed(1)} MB`;
  console.log('## A backup over a link cut every 1/10 of its bytes (bench/resume.ts)\n');
  console.log(
    `${m.cpu}, ${m.cores} cores, Node.js ${m.node}; a generated knowledge base of ${documents.toLocaleString('en')} documents (${dataset.exported.toLocaleString('en')} exported); ` +
      `bytes moved are what the proxy forwarded to the client (compressed as the server sent them, headers included); the cut comes after every ${mb(every)}.\n`,
  );
  console.log('| Client | Bytes moved | × uncut | Cuts | Whole file |');
  console.log('|---|---:|---:|---:|---|');
  console.log(`| \`backup\`, uncut (baseline) | ${mb(wholeBytes)} | 1.00× | 0 | yes, ${whole.seconds.toFixed(1)} s |`);
  console.log(
    `| \`backup\`, resuming after each cut | ${mb(resumedBytes)} | ${(resumedBytes / wholeBytes).toFixed(2)}× | ${resumedCuts} | yes, ${resumed.seconds.toFixed(1)} s (a second of back-off a cut) |`,
  );
  console.log(
    `| a client restarting from the first byte (${attempts} attempts) | ${mb(restartBytes)} | ${(restartBytes / wholeBytes).toFixed(2)}× | ${attempts} | ${restartedWhole ? 'yes' : 'never'} |`,
  );
} finally {
  for (const fn of teardowns.reverse()) await fn();
  rmSync(dir, { recursive: true, force: true });
  await server.stop();
  await db.close();
}
