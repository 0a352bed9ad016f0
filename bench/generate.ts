#!/usr/bin/env node
/**
 * `node dist/bench/generate.js`: generates a knowledge base of a named size (src/generate/generator.ts)
 * and loads it straight into a database (COPY, bench/lib/load-generated.ts), writes it as a seed file
 * (seed-format.md, for `kb-export load`), or prints the size of its default export. Progress goes
 * to stderr, the result to stdout.
 */
import fs from 'node:fs';
import { once } from 'node:events';
import { Command, InvalidArgumentError, Option } from 'commander';
import { connect } from '../src/db/connect.js';
import { assertSchemaCurrent } from '../src/db/migrate.js';
import { DEFAULT_MEDIA_PREFIX, estimateExportBytes } from './lib/expected-export.js';
import { documentsForSize, generatedBook, SIZE_NAMES, SIZES } from '../src/generate/sizes.js';
import { generateDocuments } from '../src/generate/generator.js';
import { apiKeyId, loadGenerated } from './lib/load-generated.js';

interface Options {
  size?: string;
  documents?: number;
  seed: number;
  databaseUrl?: string;
  seedFile?: string;
  estimate?: boolean;
  lowerBound?: boolean;
  bookId?: string;
  slug?: string;
  user: string;
  apiKey: string;
  replace?: boolean;
  quiet?: boolean;
}

function integer(name: string, min: number) {
  return (v: string): number => {
    const n = Number(v);
    if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer ≥ ${min}.`);
    return n;
  };
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;

const count = (n: number) => n.toLocaleString('en');

/** `bytes` over `ms` in MB/s. */
const rate = (bytes: number, ms: number) => `${(bytes / 1e3 / Math.max(ms, 1)).toFixed(1)} MB/s`;

/** Progress lines on stderr, at most one every 2 s, with throughput since the start when bytes are known. */
function progress(quiet: boolean, total: number) {
  const started = Date.now();
  let last = started;
  return (done: number, bytes?: number): void => {
    const now = Date.now();
    if (quiet || now - last < 2000) return;
    last = now;
    const volume = bytes === undefined ? '' : `, ${mb(bytes)}, ${rate(bytes, now - started)}`;
    process.stderr.write(`  ${count(done)} / ${count(total)} documents${volume}\n`);
  };
}

/**
 * Writes the seed file: users first, then the book's fields, `id` first, then its documents, one
 * JSON value at a time with the file stream's backpressure respected (seed-format.md rule 1; the
 * loader streams documents and needs the book's id before them).
 */
async function writeSeedFile(
  file: string,
  o: { seed: number; user: string; apiKey: string; bookId: string; slug: string; documents: number; quiet: boolean },
): Promise<number> {
  const out = fs.createWriteStream(file);
  const failed = once(out, 'error').then(([err]) => {
    throw err;
  });
  failed.catch(() => {});
  const write = async (s: string) => {
    if (!out.write(s)) await Promise.race([once(out, 'drain'), failed]);
  };
  const book = generatedBook({
    bookId: o.bookId,
    bookSlug: o.slug,
    userId: o.user,
    documents: o.documents,
    seed: o.seed,
  });
  const user = { id: o.user, name: o.user, apiKeys: [{ id: apiKeyId(o.user, o.apiKey), key: o.apiKey }] };
  const { id, ...fields } = book;
  const bookFields = JSON.stringify(fields).slice(1, -1);
  await write(`{"users":[${JSON.stringify(user)}],"books":[{"id":${JSON.stringify(id)},${bookFields},"documents":[\n`);
  const report = progress(o.quiet, o.documents);
  let n = 0;
  let chunk = '';
  for (const d of generateDocuments({ bookId: o.bookId, documents: o.documents, seed: o.seed })) {
    chunk += (n > 0 ? ',\n' : '') + JSON.stringify(d);
    n++;
    if (chunk.length >= 1 << 20) {
      await write(chunk);
      chunk = '';
    }
    report(n, out.bytesWritten + out.writableLength);
  }
  await write(chunk + '\n]}]}\n');
  out.end();
  await Promise.race([once(out, 'close'), failed]);
  return out.bytesWritten;
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('generate')
    .description(
      'Generate a realistic knowledge base (src/generate/generator.ts, deterministic for a seed) and load it into a ' +
        'database with COPY, write it as a seed file for `kb-export load`, or print the size of its export.',
    )
    .addOption(new Option('--size <name>', 'named size').choices(SIZE_NAMES))
    .option(
      '--documents <n>',
      'number of documents instead of a named size (categories included)',
      integer('--documents', 0),
    )
    .option('--seed <n>', 'generator seed', integer('--seed', 0), 42)
    .option('--database-url <url>', 'load into this database (its schema must be current: kb-export migrate)')
    .option('--seed-file <path>', 'write a seed file (seed-format.md) instead')
    .option(
      '--estimate',
      'print the byte size of the default export body instead (media URLs rewritten; slow: HTML tokenizer)',
    )
    .option('--lower-bound', 'with --estimate: count contentHtml as stored (a lower bound, several times faster)')
    .option('--book-id <id>', 'book id (default: bench-<slug>)')
    .option('--slug <slug>', 'book slug (default: the size name, or generated-<documents>)')
    .option('--user <id>', 'owner user id, created when missing', 'bench-user')
    .option(
      '--api-key <key>',
      "owner's API key, created when missing (the default is public: use your own outside throw-away databases)",
      'kbx_bench_key',
    )
    .option('--replace', 'with --database-url: reload a book with this id that holds other data (default: refuse)')
    .option('--quiet', 'no progress lines on stderr')
    .addHelpText(
      'after',
      `
Sizes (documents, seed 42): ${SIZE_NAMES.map((s) => `${s} ${count(SIZES[s])}`).join(', ')}.
  large is sized so that its default export body is over 2 GB.

Examples:
  node dist/bench/generate.js --size medium --database-url postgres://postgres@127.0.0.1:5432/kb
  node dist/bench/generate.js --size small --seed 7 --seed-file small.json && kb-export load small.json
  node dist/bench/generate.js --size large --estimate --lower-bound`,
    )
    .showHelpAfterError('(--help for usage)');
  program.parse(argv);
  const o = program.opts<Options>();

  const modes = [o.databaseUrl, o.seedFile, o.estimate].filter((m) => m !== undefined).length;
  if (modes !== 1) program.error('give exactly one of --database-url, --seed-file, --estimate');
  if ((o.size === undefined) === (o.documents === undefined)) program.error('give either --size or --documents');
  const documents = o.documents ?? documentsForSize(o.size!);
  const slug = o.slug ?? o.size ?? `generated-${documents}`;
  const bookId = o.bookId ?? `bench-${slug}`;
  const quiet = Boolean(o.quiet);
  const log = (line: string) => {
    if (!quiet) process.stderr.write(line + '\n');
  };
  const started = Date.now();
  const seconds = () => (Date.now() - started) / 1000;

  if (o.estimate) {
    log(`estimating the export of ${count(documents)} documents (seed ${o.seed})`);
    const report = progress(quiet, documents);
    const e = estimateExportBytes({
      bookId,
      bookSlug: slug,
      userId: o.user,
      documents,
      seed: o.seed,
      rewrite: !o.lowerBound,
      onProgress: (n) => report(n),
    });
    const what = o.lowerBound ? 'at least' : `with media prefix ${DEFAULT_MEDIA_PREFIX}:`;
    process.stdout.write(
      `default export of ${slug}: ${count(e.documents)} documents, ${what} ${e.bytes} bytes (${mb(e.bytes)}), ` +
        `computed in ${seconds().toFixed(1)} s\n`,
    );
    return;
  }

  if (o.seedFile) {
    log(`writing ${count(documents)} documents (seed ${o.seed}) to ${o.seedFile}`);
    const bytes = await writeSeedFile(o.seedFile, {
      seed: o.seed,
      user: o.user,
      apiKey: o.apiKey,
      bookId,
      slug,
      documents,
      quiet,
    });
    const s = seconds();
    process.stdout.write(
      `wrote ${o.seedFile}: ${count(documents)} documents, ${mb(bytes)} in ${s.toFixed(1)} s (${rate(bytes, s * 1e3)})\n`,
    );
    return;
  }

  const sql = connect(o.databaseUrl!, { max: 2, applicationName: 'kb-export-generate' });
  try {
    await assertSchemaCurrent(sql);
    log(`loading ${count(documents)} documents (seed ${o.seed}) into book ${bookId}`);
    const r = await loadGenerated(sql, {
      documents,
      seed: o.seed,
      bookId,
      bookSlug: slug,
      userId: o.user,
      apiKey: o.apiKey,
      replace: Boolean(o.replace),
      onProgress: progress(quiet, documents),
    });
    const s = r.ms / 1000;
    process.stdout.write(
      r.skipped
        ? `book ${bookId} already holds these ${count(r.documents)} documents: nothing to do\n`
        : `loaded ${count(r.documents)} documents (${mb(r.bytes)} of COPY text) into book ${bookId} in ${s.toFixed(1)} s ` +
            `(${rate(r.bytes, r.ms)})\n`,
    );
    process.stdout.write(
      `export: curl -H 'Authorization: Bearer ${o.apiKey}' <server>/api/v1/open/books/${slug}/docs\n`,
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
}

main(process.argv).catch((err: unknown) => {
  process.stderr.write(`generate: ${(err as Error)?.message ?? String(err)}\n`);
  process.exitCode = 1;
});
