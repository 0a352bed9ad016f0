/**
 * The backup client's commands of `kb-export`: `backup`, `verify` and `changes`, which talk to a
 * server over HTTP and never load it, and `restore`, which reads a backup into a database.
 * Registered on the executable's program (kb-export.ts).
 */
import { Option, type Command } from 'commander';
import type { Config } from '../config.js';

interface BackupCliOptions {
  server: string;
  book: string;
  out: string;
  format: 'json' | 'ndjson';
  includeCategories?: boolean;
  html: boolean;
  ifChanged?: boolean;
  incremental?: boolean;
  retries: number;
  timeout: number;
  compressed?: boolean;
  keyFile?: string;
  quiet?: boolean;
  mediaDir?: string;
  mediaConcurrency: number;
  mediaRefresh?: boolean;
  mediaTimeout: number;
}

/** What the executable lends its commands: output, option parsing and error handling. */
interface CliHelpers {
  print(line: string): void;
  /** The validated environment, read when a command needs it (ConfigError otherwise). */
  config(): Config;
  integerOption(value: string): number;
  action<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void>;
}

/** Adds the client commands to `program`. */
export function registerClientCommands(program: Command, { print, config, integerOption, action }: CliHelpers): void {
  program
    .command('backup')
    .description('download an export, verified, atomically into PATH (the key from KB_EXPORT_API_KEY or --key-file)')
    .requiredOption('--server <url>', 'the kb-export server, e.g. http://127.0.0.1:3000')
    .requiredOption('--book <slug>', 'the knowledge base slug')
    .requiredOption(
      '--out <path>',
      "the file to write (.gz, .br, .zst: compressed, with the server's bytes when it offers that encoding); - for standard output",
    )
    .addOption(new Option('--format <format>', 'json or ndjson').choices(['json', 'ndjson']).default('json'))
    .option('--include-categories', 'include folder nodes (excludeCategories=false)')
    .option('--no-html', 'contentHtml as null (includeContentHtml=false)')
    .option(
      '--if-changed',
      'keep the ETag, size and SHA-256 of PATH in PATH.etag; download only when the export changed or PATH no longer matches',
    )
    .option(
      '--incremental',
      'keep the change token, size and SHA-256 of PATH in PATH.token; download only the changes since and merge them into PATH (a full export when PATH no longer matches, the token expired (410) or was issued for other options)',
    )
    .option(
      '--retries <n>',
      "attempts after the first for 429, 503 and cut connections (the export's, and each media file's)",
      integerOption,
      5,
    )
    .option('--timeout <seconds>', 'longest wait for the server to answer or send more data', integerOption, 300)
    .option(
      '--compressed',
      'for a plain PATH, ask for the export compressed in transit and decode it here (a slow link; a .gz, .br or .zst PATH always is)',
    )
    .option('--key-file <file>', 'read the API key from this file instead of KB_EXPORT_API_KEY')
    .option('--quiet', 'no progress and no final line')
    .option(
      '--media-dir <dir>',
      'save every media file the export names under its Export-Media-Prefix into DIR, at its path below the prefix (a folder to rsync, aws s3 sync or cp -r back into the media store); listed in PATH.manifest.json',
    )
    .option('--media-concurrency <n>', 'media files fetched at once (1-64)', integerOption, 8)
    .option('--media-refresh', 'fetch every media file again, even one still in DIR as the last manifest lists it')
    .option(
      '--media-timeout <seconds>',
      'longest wait for a media server to answer or send more data, per request',
      integerOption,
      30,
    )
    .addHelpText(
      'after',
      `
  Exit codes: 0 written or unchanged, 1 failed after retries (at once when PATH cannot be written),
  2 usage error, 3 key refused or knowledge base not found, 4 the export was saved but some media
  files are missing (after their retries; each is listed in PATH.manifest.json with why). PATH is
  replaced only by a whole export (well-formed, success true, meta.count equal to the documents);
  anything else leaves it as it was.

  Beside a file PATH it keeps PATH.manifest.json (the export's size, SHA-256, documents, ETag and
  change token, and each media file's path, size, SHA-256 and content type) and PATH.sha256
  (sha256sum -c PATH.sha256, run in PATH's folder, checks the export and the media without
  kb-export; so does kb-export verify PATH). Neither is rewritten when its content is unchanged.

  --incremental writes the same bytes as a full backup of that moment (the same JSON or NDJSON; a
  compressed PATH is compressed here, so only its decompressed bytes are the same), atomically too:
  a crash leaves PATH and PATH.token as they were.

  Example (cron):
    KB_EXPORT_API_KEY=kbx_… kb-export backup --server https://kb.example.com --book handbook \\
      --out /backups/handbook.json.gz --if-changed --quiet
    KB_EXPORT_API_KEY=kbx_… kb-export backup --server https://kb.example.com --book handbook \\
      --out /backups/handbook.ndjson.gz --format ndjson --incremental --quiet
    KB_EXPORT_API_KEY=kbx_… kb-export backup --server https://kb.example.com --book handbook \\
      --out /backups/handbook.json --media-dir /backups/media --quiet`,
    )
    .action(async (opts: BackupCliOptions) => {
      const { runFileBackup } = await import('../backup/media-backup.js');
      const { BackupError } = await import('../backup/backup-error.js');
      try {
        const outcome = await runFileBackup(
          {
            server: opts.server,
            book: opts.book,
            out: opts.out,
            format: opts.format,
            includeCategories: Boolean(opts.includeCategories),
            html: opts.html,
            ifChanged: Boolean(opts.ifChanged),
            incremental: Boolean(opts.incremental),
            retries: opts.retries,
            timeoutS: opts.timeout,
            compressed: Boolean(opts.compressed),
            quiet: Boolean(opts.quiet),
            ...(opts.keyFile !== undefined ? { keyFile: opts.keyFile } : {}),
            ...(opts.mediaDir !== undefined ? { mediaDir: opts.mediaDir } : {}),
            mediaConcurrency: opts.mediaConcurrency,
            mediaRefresh: Boolean(opts.mediaRefresh),
            mediaTimeoutS: opts.mediaTimeout,
          },
          (l) => process.stderr.write(`kb-export backup: ${l}\n`),
        );
        if (!opts.quiet) process.stderr.write(`${outcome.line}\n`);
        if (outcome.missing !== null) {
          process.stderr.write(`kb-export backup: ${outcome.missing}\n`);
          process.exitCode = 4;
        }
      } catch (err) {
        process.stderr.write(`kb-export backup: ${(err as Error).message}\n`);
        process.exitCode = err instanceof BackupError ? err.exitCode : 1;
      }
    });

  program
    .command('verify')
    .description(
      'check a backup against its PATH.manifest.json: the export whole and unchanged, every media file present with its size and SHA-256, every media URL listed',
    )
    .argument('<path>', 'the backup file (as given to backup --out)')
    .option('--media-dir <dir>', "the media folder, when it moved (default: the manifest's, relative to PATH's folder)")
    .option('--quiet', 'problems only, no final line')
    .addHelpText(
      'after',
      `
  Checks, reading each file once and holding one document and one entry at a time:
    PATH                 its size and SHA-256 as the manifest lists them; well-formed, success true,
                         meta.count equal to the documents and to the manifest's count
    DIR/…                every media file listed, with its size and SHA-256 (no symbolic links)
    media URLs           every one of the export is a listed file or a listed failure, and the
                         manifest lists no other
    PATH.sha256          says what the manifest says

  Each problem is printed on a line of its own (standard output). Exit codes: 0 no problem, 1 one or
  more problems, 2 usage error (PATH missing).

  Example:
    kb-export verify /backups/handbook.json && (cd /backups && sha256sum -c --quiet handbook.json.sha256)`,
    )
    .action(async (file: string, opts: { mediaDir?: string; quiet?: boolean }) => {
      const { verifyBackup } = await import('../backup/verify-command.js');
      const { BackupError } = await import('../backup/backup-error.js');
      try {
        const r = await verifyBackup(
          { file, ...(opts.mediaDir !== undefined ? { mediaDir: opts.mediaDir } : {}) },
          print,
        );
        if (!opts.quiet) process.stderr.write(`${r.line}\n`);
        if (r.problems > 0) process.exitCode = 1;
      } catch (err) {
        process.stderr.write(`kb-export verify: ${(err as Error).message}\n`);
        process.exitCode = err instanceof BackupError ? err.exitCode : 1;
      }
    });

  program
    .command('changes')
    .description(
      'write the changes since the last run as NDJSON records to standard output, for search indexers and ETL (the key from KB_EXPORT_API_KEY or --key-file)',
    )
    .requiredOption('--server <url>', 'the kb-export server, e.g. http://127.0.0.1:3000')
    .requiredOption('--book <slug>', 'the knowledge base slug')
    .requiredOption(
      '--state <file>',
      'where the change token of the last complete run is kept (created on the first run)',
    )
    .option('--include-categories', 'include folder nodes (excludeCategories=false)')
    .option('--no-html', 'contentHtml as null (includeContentHtml=false)')
    .option('--retries <n>', 'attempts after the first for 429 and 503', integerOption, 5)
    .option('--timeout <seconds>', 'longest wait for the server to answer or send more data', integerOption, 300)
    .option('--key-file <file>', 'read the API key from this file instead of KB_EXPORT_API_KEY')
    .option('--quiet', 'no lines on standard error but errors')
    .addHelpText(
      'after',
      `
  Output, one JSON object a line:
    {"op":"upsert","document":{…}}   a document changed or new since the last run (every document,
                                     as the export has it, on the first run, without a state file)
    {"op":"remove","id":"…"}         a document deleted, made inactive or no longer exported
  Apply them in order, idempotently: the state file moves on to the new token only once the whole
  answer arrived (meta.count checked) and standard output took every byte, so a run that fails or is
  killed sends the same changes again next time (at least once), and none is ever skipped.

  Exit codes: 0 done, 1 failed (the state file unchanged), 2 usage error (or a state file kept for
  other options), 3 key refused, knowledge base not found or a 400, 4 the state's token expired
  (410 CHANGE_TOKEN_EXPIRED, after CHANGE_RETENTION_DAYS): the removals since can no longer be
  listed, so nothing is written; remove the state file to start again with a full read and rebuild
  what you keep from it.

  Example:
    KB_EXPORT_API_KEY=kbx_… kb-export changes --server http://127.0.0.1:3000 --book demo \\
      --state demo.changes.json | my-indexer`,
    )
    .action(
      async (opts: {
        server: string;
        book: string;
        state: string;
        includeCategories?: boolean;
        html: boolean;
        retries: number;
        timeout: number;
        keyFile?: string;
        quiet?: boolean;
      }) => {
        const { runChanges } = await import('../backup/changes-command.js');
        const { BackupError } = await import('../backup/backup-error.js');
        try {
          const line = await runChanges(
            {
              server: opts.server,
              book: opts.book,
              state: opts.state,
              includeCategories: Boolean(opts.includeCategories),
              html: opts.html,
              retries: opts.retries,
              timeoutS: opts.timeout,
              quiet: Boolean(opts.quiet),
              ...(opts.keyFile !== undefined ? { keyFile: opts.keyFile } : {}),
            },
            (l) => process.stderr.write(`kb-export changes: ${l}\n`),
          );
          if (!opts.quiet) process.stderr.write(`${line}\n`);
        } catch (err) {
          process.stderr.write(`kb-export changes: ${(err as Error).message}\n`);
          process.exitCode = err instanceof BackupError ? err.exitCode : 1;
        }
      },
    );

  program
    .command('restore')
    .description(
      'load an export (a backup, JSON or NDJSON, .gz/.br/.zst too) back as a knowledge base, all-or-nothing; a file not beginning with "success": true is refused',
    )
    .requiredOption('--owner <userId>', 'the user who will own the restored knowledge base')
    .requiredOption('--file <path>', 'the export file')
    .addOption(
      new Option(
        '--format <format>',
        'json or ndjson (default: ndjson when the name ends .ndjson or .jsonl, before any .gz/.br/.zst)',
      ).choices(['json', 'ndjson']),
    )
    .action(
      action(async (opts: { owner: string; file: string; format?: 'json' | 'ndjson' }) => {
        const { restoreCommand } = await import('../backup/restore-command.js');
        await restoreCommand(config(), opts, print);
      }),
    );
}
