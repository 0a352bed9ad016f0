/**
 * `node dist/bench/compression.js [--documents N]`: what each Content-Encoding costs and saves on
 * an export body (decisions.md D9.3), to choose the server's default levels. The body is the
 * default export of N generated documents (src/generate, the benchmarks' realistic distribution,
 * 3,000 by default: about 40 MB), compressed in 64 KiB writes with a flush every 2 MB, as the
 * server streams it. Prints, per codec and level: input MB/s on one core, output size as a share
 * of the input, and both as ratios against gzip level 6 measured in the same run.
 */
import { performance } from 'node:perf_hooks';
import zlib from 'node:zlib';
import { DEFAULT_MEDIA_PREFIX, exportedDocument } from './lib/expected-export.js';
import { generateDocuments } from '../src/generate/generator.js';
import { machineInfo } from './machine.js';

interface Codec {
  name: string;
  make: () => zlib.Gzip | zlib.BrotliCompress;
  flush: number;
}

const gzip = (level: number): Codec => ({
  name: `gzip ${level}`,
  make: () => zlib.createGzip({ level }),
  flush: zlib.constants.Z_SYNC_FLUSH,
});
const br = (quality: number): Codec => ({
  name: `br ${quality}`,
  make: () =>
    zlib.createBrotliCompress({
      params: {
        [zlib.constants.BROTLI_PARAM_QUALITY]: quality,
        [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
      },
    }),
  flush: zlib.constants.BROTLI_OPERATION_FLUSH,
});

function body(documents: number): Buffer {
  const parts: Buffer[] = [Buffer.from('{"success":true,"book":{},"documents":[')];
  let i = 0;
  for (const d of generateDocuments({ bookId: 'bench', documents, seed: 42 })) {
    if (d.status !== undefined && d.status !== 1) continue;
    if (d.type === 'category') continue;
    parts.push(Buffer.from((i++ > 0 ? ',' : '') + JSON.stringify(exportedDocument(d, DEFAULT_MEDIA_PREFIX))));
  }
  parts.push(Buffer.from(`],"meta":{"count":${i}}}`));
  return Buffer.concat(parts);
}

async function run(codec: Codec, input: Buffer): Promise<{ ms: number; out: number }> {
  const z = codec.make();
  let out = 0;
  z.on('data', (c: Buffer) => (out += c.length));
  const done = new Promise((resolve) => z.on('end', resolve));
  const t0 = performance.now();
  for (let at = 0; at < input.length; at += 64 * 1024) {
    if (!z.write(input.subarray(at, at + 64 * 1024))) await new Promise((r) => z.once('drain', r));
    if (at % (2 * 1024 * 1024) === 0) await new Promise((r) => z.flush(codec.flush, () => r(undefined)));
  }
  z.end();
  await done;
  return { ms: performance.now() - t0, out };
}

const documents = Number(process.argv[process.argv.indexOf('--documents') + 1]) || 3000;
const input = body(documents);
const codecs = [gzip(1), gzip(4), gzip(6), br(1), br(4), br(5)];
const m = machineInfo();
console.log(
  `# Compression of an export body\n\n${m.cpu}, ${m.cores} cores, Node.js ${m.node}; ${documents} generated documents, ${(input.length / 1e6).toFixed(1)} MB of JSON; median of 3 runs.\n`,
);
const results = new Map<string, { mbs: number; share: number }>();
for (const codec of codecs) {
  const runs = [];
  for (let i = 0; i < 3; i++) runs.push(await run(codec, input));
  runs.sort((a, b) => a.ms - b.ms);
  const { ms, out } = runs[1]!;
  results.set(codec.name, { mbs: input.length / 1e6 / (ms / 1000), share: out / input.length });
}
const base = results.get('gzip 6')!;
console.log('| Encoding | MB/s in (one core) | × gzip 6 speed | output / input | × gzip 6 size |');
console.log('|---|---:|---:|---:|---:|');
for (const [name, r] of results) {
  console.log(
    `| ${name} | ${r.mbs.toFixed(0)} | ${(r.mbs / base.mbs).toFixed(2)} | ${(r.share * 100).toFixed(1)} % | ${(r.share / base.share).toFixed(2)} |`,
  );
}
