/**
 * `npm run build && node dist/bench/media.js [--runs N] [--quick]`: the media of `kb-export backup
 * --media-dir` against two baselines measured in the same run on the same files from the same local
 * static server, each a process of its own fetching at the same concurrency (8):
 * - `curl --parallel --parallel-max 8` with one `url`/`output` pair per file (what people script
 *   without this client), and the same followed by `sync -f` on its folder, which makes the files
 *   durable as the client's fsyncs do;
 * - a plain undici fetcher (bench/lib/undici-fetch.ts): request, pipe to a file, nothing else.
 * The client also reads the export back for its media URLs, sorts them, hashes every byte into the
 * manifest, fsyncs each file and its folder and writes PATH.manifest.json and PATH.sha256; the
 * baselines do none of that. Three sets of files: many small ones (files/s), image-sized ones (a
 * web page's pictures) and a few large ones (MB/s). Then the same backup again, unchanged (every file checked by size and SHA-256, none
 * fetched), and `kb-export verify PATH`, each against `sha256sum -c` of the backup's PATH.sha256. The server is node:http in this
 * process serving the files from disk, with an export of one document per 25 media files
 * naming them under `/media/`. Each the median of N alternating runs (default 3), with the
 * client's peak RSS. Prints Markdown.
 */
import { spawn } from 'node:child_process';
import { createReadStream, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCli, type CliRun } from './lib/cli-process.js';
import { machineInfo } from './machine.js';

const arg = (name: string, fallback: string) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : fallback;
const quick = process.argv.includes('--quick');
const runs = Number(arg('--runs', quick ? '1' : '3'));
const CONCURRENCY = 8;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (line: string) => process.stderr.write(`[media] ${line}\n`);
const FETCHER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), 'lib/undici-fetch.js');

interface FileSet {
  label: string;
  count: number;
  bytes: number;
}

const SETS: FileSet[] = quick
  ? [
      { label: 'small files', count: 500, bytes: 10 * 1024 },
      { label: 'image-sized files', count: 200, bytes: 100 * 1024 },
      { label: 'large files', count: 4, bytes: 16 * 2 ** 20 },
    ]
  : [
      { label: 'small files', count: 5000, bytes: 10 * 1024 },
      { label: 'image-sized files', count: 2000, bytes: 100 * 1024 },
      { label: 'large files', count: 16, bytes: 32 * 2 ** 20 },
    ];

const root = mkdtempSync(path.join(os.tmpdir(), 'kb-export-bench-media-'));
const source = path.join(root, 'source');

/** Writes a set's files under source/<set>/, in folders of 100, each a block of its own bytes. */
function writeSet(set: FileSet, name: string): string[] {
  const paths: string[] = [];
  for (let i = 0; i < set.count; i++) {
    const rel = `${name}/d${Math.floor(i / 100)}/file-${i}.bin`;
    mkdirSync(path.join(source, path.dirname(rel)), { recursive: true });
    const block = Buffer.alloc(Math.min(set.bytes, 1 << 20), `${rel} `);
    const file = path.join(source, rel);
    writeFileSync(file, '');
    for (let left = set.bytes; left > 0; left -= block.length)
      writeFileSync(file, block.subarray(0, Math.min(left, block.length)), { flag: 'a' });
    paths.push(rel);
  }
  return paths;
}

/** The export body naming `paths` under /media/, 25 to a document, each twice (img src and a srcset). */
function exportBody(paths: string[]): Buffer {
  const documents = [];
  for (let i = 0; i < paths.length; i += 25) {
    const html = paths
      .slice(i, i + 25)
      .map((p) => `<p><img src="/media/${p}" srcset="/media/${p} 1x"></p>`)
      .join('');
    documents.push({ id: `d${i}`, name: `Document ${i}`, cover: null, contentHtml: html });
  }
  return Buffer.from(
    JSON.stringify({
      success: true,
      book: { id: 'b', slug: 'media', name: 'Media' },
      documents,
      meta: { count: documents.length },
    }),
  );
}

let body: Buffer = Buffer.alloc(0);
const server = http.createServer((req, res) => {
  const url = decodeURIComponent((req.url ?? '').split('?')[0]!);
  if (url.startsWith('/api/')) {
    res.writeHead(200, { 'content-type': 'application/json', 'export-media-prefix': '/media/', etag: '"bench"' });
    res.end(body);
    return;
  }
  const file = path.join(source, url.slice('/media/'.length));
  if (!url.startsWith('/media/') || !file.startsWith(source + path.sep)) {
    res.writeHead(404).end();
    return;
  }
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
  createReadStream(file).pipe(res);
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;

/** Runs a command to its end; its wall time in ms. Rejects on a non-zero exit. */
function timed(cmd: string, args: string[], cwd: string): Promise<number> {
  const started = performance.now();
  const child = spawn(cmd, args, {
    cwd,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  return new Promise((resolve, reject) =>
    child.on('exit', (code) =>
      code === 0 ? resolve(performance.now() - started) : reject(new Error(`${cmd} exited ${code}: ${stderr}`)),
    ),
  );
}

interface Figures {
  set: FileSet;
  client: CliRun[];
  clientMediaS: number[];
  curl: number[];
  curlSync: number[];
  undici: number[];
  unchanged: CliRun[];
  verify: CliRun[];
  sha256sum: number[];
}

const mediaSeconds = (r: CliRun) => Number(/media: .* in ([\d.]+) s;/.exec(r.stderr)?.[1] ?? NaN);

async function measure(set: FileSet, name: string): Promise<Figures> {
  log(`${set.count} ${set.label} of ${set.bytes} bytes: writing them`);
  const paths = writeSet(set, name);
  body = exportBody(paths);
  const list = path.join(root, `${name}.urls`);
  writeFileSync(list, paths.map((p) => `${base}/media/${p}\n`).join(''));
  const f: Figures = {
    set,
    client: [],
    clientMediaS: [],
    curl: [],
    curlSync: [],
    undici: [],
    unchanged: [],
    verify: [],
    sha256sum: [],
  };
  for (let run = 0; run < runs; run++) {
    const work = path.join(root, `run-${name}-${run}`);
    mkdirSync(work);
    const curlConfig = path.join(work, 'curl.conf');
    writeFileSync(curlConfig, paths.map((p) => `url = "${base}/media/${p}"\noutput = "curl/${p}"\n`).join(''));
    log(
      `${name}, run ${run + 1} of ${runs}: curl, curl and sync, undici, kb-export backup, unchanged backup, sha256sum -c, verify`,
    );
    const curlArgs = ['-sf', '--parallel', '--parallel-max', String(CONCURRENCY), '--create-dirs', '-K', curlConfig];
    f.curl.push(await timed('curl', curlArgs, work));
    rmSync(path.join(work, 'curl'), { recursive: true, force: true });
    f.curlSync.push(
      (await timed('curl', curlArgs, work)) + (await timed('sync', ['-f', path.join(work, 'curl')], work)),
    );
    f.undici.push(await timed(process.execPath, [FETCHER, list, path.join(work, 'undici'), String(CONCURRENCY)], work));
    const args = [
      'backup',
      '--server',
      base,
      '--book',
      'media',
      '--out',
      path.join(work, 'kb.json'),
      '--media-dir',
      path.join(work, 'media'),
      '--media-concurrency',
      String(CONCURRENCY),
    ];
    const first = await runCli(args, { KB_EXPORT_API_KEY: 'bench' });
    if (first.code !== 0) throw new Error(`backup exited ${first.code}: ${first.stderr}`);
    f.client.push(first);
    f.clientMediaS.push(mediaSeconds(first));
    const again = await runCli(args, { KB_EXPORT_API_KEY: 'bench' });
    if (again.code !== 0 || !/\(0 fetched, 0 bytes; \d+ already there\)/.test(again.stderr))
      throw new Error(`the unchanged backup fetched again: ${again.stderr}`);
    f.unchanged.push(again);
    f.sha256sum.push(await timed('sha256sum', ['-c', '--quiet', 'kb.json.sha256'], work));
    const verified = await runCli(['verify', path.join(work, 'kb.json')], {});
    if (verified.code !== 0) throw new Error(`verify exited ${verified.code}: ${verified.stderr}`);
    f.verify.push(verified);
    rmSync(work, { recursive: true, force: true });
  }
  rmSync(path.join(source, name), { recursive: true, force: true });
  return f;
}

try {
  const figures: Figures[] = [];
  for (const [i, set] of SETS.entries()) figures.push(await measure(set, `set${i}`));
  const m = machineInfo();
  console.log(`## Media of a backup against curl and undici (bench/media.ts)\n`);
  console.log(
    `${m.cpu}, ${m.cores} cores, Node.js ${m.node}, load average ${os.loadavg()[0]!.toFixed(1)} at the end; a local node:http static server in the bench's process; ` +
      `concurrency ${CONCURRENCY} for every tool; median of ${runs} alternating run(s); peak RSS the highest of the client's runs.\n`,
  );
  console.log(
    '| Files | curl --parallel (baseline) | curl, then sync -f (baseline) | undici, plain (baseline) | kb-export backup --media-dir (media part) | × curl | × curl and sync | × undici | client peak RSS |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  const rate = (set: FileSet, ms: number) =>
    `${Math.round(set.count / (ms / 1000)).toLocaleString('en')} files/s, ${((set.count * set.bytes) / 1e6 / (ms / 1000)).toFixed(0)} MB/s`;
  for (const f of figures) {
    const [c, cs, u, k] = [
      median(f.curl),
      median(f.curlSync),
      median(f.undici),
      median(f.client.map((r) => r.seconds * 1000)),
    ];
    const media = median(f.clientMediaS) * 1000;
    const peak = Math.max(...f.client.map((r) => r.peakRss)) / 2 ** 20;
    console.log(
      `| ${f.set.count.toLocaleString('en')} × ${f.set.bytes >= 2 ** 20 ? `${f.set.bytes / 2 ** 20} MiB` : `${f.set.bytes / 1024} KiB`} | ${(c / 1000).toFixed(2)} s (${rate(f.set, c)}) | ` +
        `${(cs / 1000).toFixed(2)} s | ${(u / 1000).toFixed(2)} s (${rate(f.set, u)}) | ${(k / 1000).toFixed(2)} s (${(media / 1000).toFixed(2)} s: ${rate(f.set, media)}) | ` +
        `${(k / c).toFixed(2)}× | ${(k / cs).toFixed(2)}× | ${(k / u).toFixed(2)}× | ${peak.toFixed(0)} MB |`,
    );
  }
  console.log(
    '\n| Files | sha256sum -c PATH.sha256 (baseline) | kb-export verify PATH | × sha256sum (target ≤ 1.2×) | unchanged backup: every file checked, none fetched | × sha256sum |',
  );
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const f of figures) {
    const [s, v, k] = [
      median(f.sha256sum),
      median(f.verify.map((r) => r.seconds * 1000)),
      median(f.unchanged.map((r) => r.seconds * 1000)),
    ];
    console.log(
      `| ${f.set.count.toLocaleString('en')} × ${f.set.bytes >= 2 ** 20 ? `${f.set.bytes / 2 ** 20} MiB` : `${f.set.bytes / 1024} KiB`} | ${(s / 1000).toFixed(2)} s | ` +
        `${(v / 1000).toFixed(2)} s | ${(v / s).toFixed(2)}× | ${(k / 1000).toFixed(2)} s | ${(k / s).toFixed(2)}× |`,
    );
  }
} finally {
  server.close();
  rmSync(root, { recursive: true, force: true });
}
