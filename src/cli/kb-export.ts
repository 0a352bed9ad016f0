#!/usr/bin/env -S MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 node --max-semi-space-size=2 --heap-growing-percent=100 --expose-gc
/** `kb-export`, the CLI entry point; its shebang is the one place for the runtime flags (bench/optimisations.md). */
import { ConfigError } from '../errors.js';
import { Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig, type Config } from '../config.js';
// Each command loads what it needs when it runs: the backup client never loads the server.
const commands = () => import('./commands.js');
import { registerClientCommands } from './client-commands.js';
import { registerMirrorCommand } from './mirror-cli.js';

const print = (line: string) => process.stdout.write(line + '\n');

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
      const message =
        err instanceof ConfigError ? `configuration error: ${err.message}` : ((err as Error)?.message ?? String(err));
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
  .description(
    'Streaming export server for very large knowledge bases.\nConfiguration is read from the environment: see README.md.',
  )
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
  .option(
    '--demo',
    'development: migrate, load a generated demo knowledge base into an empty embedded database, serve its media (generated images) under MEDIA_PROXY_PREFIX, print a key and a curl command',
  )
  .action(
    action(async (opts: { demo?: boolean; migrate?: boolean }) => {
      const { serve } = await import('../server.js');
      // The generator is loaded only for --demo: a plain serve never imports it.
      const prepare = opts.demo ? (await import('../generate/demo.js')).demoPreparation : undefined;
      const media = opts.demo ? (await import('../generate/demo-media.js')).registerDemoMedia : undefined;
      const routes = media
        ? { routes: (app: Parameters<typeof media>[0], c: Config) => void media(app, c.mediaProxyPrefix) }
        : {};
      await serve(config(), {
        migrate: Boolean(opts.migrate || opts.demo),
        ...(prepare ? { prepare } : {}),
        ...routes,
      });
    }),
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
  .action(
    action(async (opts: { user: string; expiresAt?: string; id?: string }) =>
      (await commands()).createKeyCommand(config(), opts, print),
    ),
  );
keys
  .command('revoke')
  .description('revoke an API key; requests with it get 401 from then on')
  .argument('<keyId>', 'the key id printed by keys create')
  .action(action(async (id: string) => (await commands()).revokeKeyCommand(config(), id, print)));

registerClientCommands(program, { print, config, integerOption, action });
registerMirrorCommand(program, integerOption);

program
  .command('warm')
  .description(
    "compute the rewrite plans of a knowledge base's documents ahead of its first export, under MEDIA_PROXY_PREFIX (the server's must match)",
  )
  .requiredOption('--book <slug>', 'the knowledge base slug')
  .option('--owner <userId>', 'its owner, when several users have a knowledge base with that slug')
  .action(
    action(async (opts: { book: string; owner?: string }) =>
      import('./warm-command.js').then(({ warmCommand }) => warmCommand(config(), opts, print)),
    ),
  );

program
  .command('backfill')
  .description(
    'fill the export text of documents written before migrations 0009 and 0010, a batch of rows per transaction (resumable; exports are right meanwhile)',
  )
  .action(
    action(async () => import('./backfill-command.js').then(({ backfillCommand }) => backfillCommand(config(), print))),
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
