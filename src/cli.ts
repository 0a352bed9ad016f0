#!/usr/bin/env -S MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 node --max-semi-space-size=2 --heap-growing-percent=100
/**
 * `kb-export`: the command-line entry point (serve, migrate, load, keys, import-html).
 * Configuration comes from the environment (see README.md); a bad value stops with its name.
 *
 * The shebang above is the one place the server's runtime settings are written: npm start, the
 * Docker image, the benchmarks and the tests all run this file as an executable (the build sets
 * its mode). The V8 flags keep the heap small under the export's allocation rate; the glibc
 * settings give large buffers mappings of their own that are unmapped when freed, and cap the
 * arenas the worker threads may take. bench/optimisations.md has the figures behind each.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { ConfigError, loadConfig, type Config } from './config.js';
// Each command loads what it needs when it runs: the backup client never loads the server.
const commands = () => import('./cli/commands.js');

const print = (line: string) => process.stdout.write(line + '\n');

interface BackupCliOptions {
  server: string;
  book: string;
  out: string;
  format: 'json' | 'ndjson';
  includeCategories?: boolean;
  html: boolean;
  ifChanged?: boolean;
  retries: number;
  timeout: number;
  keyFile?: string;
  quiet?: boolean;
}

/** A whole number option; anything else is a usage error (exit 2). */
function integerOption(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a whole number');
  return Number(value);
}

function config(): Config {
  return loadConfig(process.env);
}

/** Runs a command; failures print one line (no stack trace) and set a non-zero exit code. */
function action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      const message = err instanceof ConfigError ? `configuration error: ${err.message}` : (err as Error)?.message ?? String(err);
      process.stderr.write(`kb-export: ${message}\n`);
      if (process.env.KB_DEBUG) process.stderr.write(`${(err as Error)?.stack}\n`);
      process.exitCode = err instanceof ConfigError ? 78 : 1;
    }
  };
}

// Usage errors (unknown options, missing arguments, bad values) exit 2, as the backup's exit codes
// document; --help and --version exit 0. Set before the commands are made: they inherit it.
const program = new Command('kb-export')
  .exitOverride((err) => {
    process.exit(err.exitCode === 0 ? 0 : 2);
  })
  .description('Streaming export server for very large knowledge bases.\nConfiguration is read from the environment: see README.md.')
  .showHelpAfterError()
  .addHelpText(
    'after',
    `
Environment:
  DATABASE_URL          postgres://… (unset, development installs only: an embedded PostgreSQL in
                        KB_DATA_DIR, default ./.data)
  MIGRATE_ON_START      true: serve applies pending migrations first (like serve --migrate)
  HOST, PORT            where serve listens (127.0.0.1, 3000)
  MEDIA_PROXY_PREFIX    prefix for relative media URLs (/media/)
  RATE_LIMIT_MAX, RATE_LIMIT_WINDOW_MS, REDIS_URL, TRUST_PROXY, LOG_LEVEL, …`,
  );

program
  .command('serve')
  .description('serve the export API (the schema must be current: see migrate, --migrate)')
  .option('--migrate', 'apply pending migrations first (also MIGRATE_ON_START=true)')
  .option('--demo', 'development: migrate, load a generated demo knowledge base into an empty embedded database, print a key and a curl command')
  .action(
    action(async (opts: { demo?: boolean; migrate?: boolean }) =>
      import('./server.js').then(({ serve }) => serve(config(), { demo: Boolean(opts.demo), migrate: Boolean(opts.migrate) })),
    ),
  );

program
  .command('migrate')
  .description('apply pending database migrations (sql/NNNN_*.sql); the only command that changes the schema')
  .action(action(async () => (await commands()).migrateCommand(config(), print)));

program
  .command('load')
  .description('load a seed file (users, API keys, knowledge bases, documents) all-or-nothing')
  .argument('<file>', 'seed file (format: docs/seed-format.md)')
  .action(action(async (file: string) => (await commands()).loadCommand(config(), file, print)));

const keys = program.command('keys').description('create and revoke API keys');
keys
  .command('create')
  .description('create an API key for a user and print it once')
  .requiredOption('--user <id>', 'the user the key belongs to')
  .option('--expires-at <iso>', 'expiry time, ISO 8601 (default: never)')
  .option('--id <id>', 'key id (default: derived from the key)')
  .action(action(async (opts: { user: string; expiresAt?: string; id?: string }) => (await commands()).createKeyCommand(config(), opts, print)));
keys
  .command('revoke')
  .description('revoke an API key; requests with it get 401 from then on')
  .argument('<keyId>', 'the key id printed by keys create')
  .action(action(async (id: string) => (await commands()).revokeKeyCommand(config(), id, print)));

program
  .command('backup')
  .description('download an export, verified, atomically into PATH (the key from KB_EXPORT_API_KEY or --key-file)')
  .requiredOption('--server <url>', 'the kb-export server, e.g. http://127.0.0.1:3000')
  .requiredOption('--book <slug>', 'the knowledge base slug')
  .requiredOption('--out <path>', 'the file to write (.gz, .br, .zst: compressed); - for standard output')
  .addOption(new Option('--format <format>', 'json or ndjson').choices(['json', 'ndjson']).default('json'))
  .option('--include-categories', 'include folder nodes (excludeCategories=false)')
  .option('--no-html', 'contentHtml as null (includeContentHtml=false)')
  .option('--if-changed', 'keep the ETag in PATH.etag and download only when the export changed')
  .option('--retries <n>', 'attempts after the first for 429, 503 and cut connections', integerOption, 5)
  .option('--timeout <seconds>', 'longest wait for the server to answer or send more data', integerOption, 300)
  .option('--key-file <file>', 'read the API key from this file instead of KB_EXPORT_API_KEY')
  .option('--quiet', 'no progress and no final line')
  .addHelpText(
    'after',
    `
Exit codes: 0 written or unchanged, 1 failed after retries, 2 usage error, 3 key refused or
knowledge base not found. PATH is replaced only by a whole export (well-formed, success true,
meta.count equal to the documents); anything else leaves it as it was.

Example (cron):
  KB_EXPORT_API_KEY=kbx_… kb-export backup --server https://kb.example.com --book handbook \\
    --out /backups/handbook.json.gz --if-changed --quiet`,
  )
  .action(async (opts: BackupCliOptions) => {
    const { runBackup, BackupError } = await import('./backup/backup-command.js');
    try {
      const line = await runBackup(
        {
          server: opts.server,
          book: opts.book,
          out: opts.out,
          format: opts.format,
          includeCategories: Boolean(opts.includeCategories),
          html: opts.html,
          ifChanged: Boolean(opts.ifChanged),
          retries: opts.retries,
          timeoutS: opts.timeout,
          quiet: Boolean(opts.quiet),
          ...(opts.keyFile !== undefined ? { keyFile: opts.keyFile } : {}),
        },
        (l) => process.stderr.write(`kb-export backup: ${l}\n`),
      );
      if (!opts.quiet) process.stderr.write(`${line}\n`);
    } catch (err) {
      process.stderr.write(`kb-export backup: ${(err as Error).message}\n`);
      process.exitCode = err instanceof BackupError ? err.exitCode : 1;
    }
  });

program
  .command('restore')
  .description('load an export (a backup, JSON or NDJSON, .gz/.br/.zst too) back as a knowledge base, all-or-nothing')
  .requiredOption('--owner <userId>', 'the user who will own the restored knowledge base')
  .requiredOption('--file <path>', 'the export file')
  .addOption(new Option('--format <format>', 'json or ndjson (default: ndjson when the name ends .ndjson or .jsonl, before any .gz/.br/.zst)').choices(['json', 'ndjson']))
  .action(
    action(async (opts: { owner: string; file: string; format?: 'json' | 'ndjson' }) => {
      const { restoreCommand } = await import('./backup/restore-command.js');
      await restoreCommand(config(), opts, print);
    }),
  );

program
  .command('warm')
  .description(
    "compute the rewrite plans of a knowledge base's documents ahead of its first export, under MEDIA_PROXY_PREFIX (the server's must match)",
  )
  .requiredOption('--book <slug>', 'the knowledge base slug')
  .option('--owner <userId>', 'its owner, when several users have a knowledge base with that slug')
  .action(
    action(async (opts: { book: string; owner?: string }) =>
      import('./cli/warm-command.js').then(({ warmCommand }) => warmCommand(config(), opts, print)),
    ),
  );

program
  .command('import-html')
  .description('turn a folder of HTML pages into a knowledge base: folders become categories, pages documents')
  .argument('<dir>', 'folder of .html/.htm pages (nested folders included)')
  .requiredOption('--owner <userId>', 'the user who owns the new knowledge base')
  .requiredOption('--slug <slug>', 'the new knowledge base slug')
  .option('--name <name>', 'display name (default: the folder name)')
  .addOption(new Option('--id <bookId>', 'knowledge base id (default: OWNER:SLUG)'))
  .action(
    action(async (dir: string, opts: { owner: string; slug: string; name?: string; id?: string }) =>
      commands().then((c) => c.importHtmlCommand(config(), dir, opts, print)),
    ),
  );

await program.parseAsync(process.argv);
