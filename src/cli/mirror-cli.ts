/** `kb-export mirror`, registered on the executable's program (kb-export.ts) beside the other client commands. */
import { Option, type Command } from 'commander';

interface MirrorCliOptions {
  server: string;
  book: string;
  out: string;
  format: 'markdown' | 'html';
  media?: boolean;
  git?: boolean;
  retries: number;
  timeout: number;
  keyFile?: string;
  quiet?: boolean;
  mediaConcurrency: number;
  mediaTimeout: number;
}

const HELP = `
  DIR gets the knowledge base's tree: a category, and a document with children, is a folder with
  its own page as index.md (index.html); any other document is NAME.md, NAME from its slug (made
  safe on Linux, macOS and Windows; among siblings that would share a name, ignoring case, the one
  created first keeps it and each other one gets a dash and 8 hex digits from its id). Each page starts with a YAML
  frontmatter (id, title, slug, type, parentId, orderKey, tags, description, emoji, cover,
  createdAt, updatedAt); a relative link naming another document's slug (other-doc, other-doc.html)
  leads to its page. SUMMARY.md lists every page in the tree's order (mdBook, GitBook);
  --format html writes index.html instead, whose nested lists link every page (no script needed).
  A page the converter cannot take within its budget (2 MB of HTML, 10 s, markup nested over 256
  deep) keeps its HTML inside the .md, with a line on standard error.

  Run it again to bring DIR up to date: only the changes since the last run are downloaded (the
  change token kept in DIR/.kb-export/), moved and renamed pages move, deleted ones go with the
  folders they leave empty, and every other file keeps its bytes and mtime. A run that fails or is
  killed is completed by the next one. When the kept token expired (410), the whole knowledge base
  is read again, and still only files that differ are written.

  Exit codes: 0 done, 1 failed (run again to complete), 2 usage error (DIR holds other files, or
  mirrors another book or format), 3 key refused or knowledge base not found, 4 done but some media
  are missing (listed in DIR/.kb-export/export.ndjson.manifest.json with why).

  Examples:
    KB_EXPORT_API_KEY=kbx_… kb-export mirror --server https://kb.example.com --book handbook \\
      --out handbook --media --git
    mkdocs build --strict    # mkdocs.yml: docs_dir: handbook, plugins: [literate-nav] (README)`;

/** Adds `mirror` to `program`; `integerOption` parses numeric options as the other commands do. */
export function registerMirrorCommand(program: Command, integerOption: (value: string) => number): void {
  program
    .command('mirror')
    .description(
      'keep a folder of Markdown (or HTML) pages in sync with a knowledge base: hierarchy as folders, SUMMARY.md, only the changes since the last run downloaded and written (the key from KB_EXPORT_API_KEY or --key-file)',
    )
    .requiredOption('--server <url>', 'the kb-export server, e.g. http://127.0.0.1:3000')
    .requiredOption('--book <slug>', 'the knowledge base slug')
    .requiredOption(
      '--out <dir>',
      'the mirror folder (created when missing; must be empty or a mirror of the same book)',
    )
    .addOption(new Option('--format <format>', 'markdown or html').choices(['markdown', 'html']).default('markdown'))
    .option('--media', 'save the media into DIR/media/ (as backup --media-dir does) and link the pages to them')
    .option(
      '--git',
      'commit each run in DIR (made a git repository on the first run), with what changed as the message',
    )
    .option('--retries <n>', 'attempts after the first for 429, 503 and cut connections', integerOption, 5)
    .option('--timeout <seconds>', 'longest wait for the server to answer or send more data', integerOption, 300)
    .option('--key-file <file>', 'read the API key from this file instead of KB_EXPORT_API_KEY')
    .option('--quiet', 'no progress and no final line')
    .option('--media-concurrency <n>', 'media files fetched at once (1-64)', integerOption, 8)
    .option('--media-timeout <seconds>', 'longest wait for a media server, per request', integerOption, 30)
    .addHelpText('after', HELP)
    .action(mirrorAction);
}

/** Runs `kb-export mirror` with the parsed options; sets the exit code (mirror-command.ts lists them). */
async function mirrorAction(opts: MirrorCliOptions): Promise<void> {
  const { runMirror } = await import('../mirror/mirror-command.js');
  const { BackupError } = await import('../backup/backup-error.js');
  try {
    const r = await runMirror(
      {
        server: opts.server,
        book: opts.book,
        out: opts.out,
        format: opts.format,
        media: Boolean(opts.media),
        git: Boolean(opts.git),
        retries: opts.retries,
        timeoutS: opts.timeout,
        quiet: Boolean(opts.quiet),
        ...(opts.keyFile !== undefined ? { keyFile: opts.keyFile } : {}),
        mediaConcurrency: opts.mediaConcurrency,
        mediaTimeoutS: opts.mediaTimeout,
      },
      (l) => process.stderr.write(`kb-export mirror: ${l}\n`),
    );
    if (!opts.quiet) process.stderr.write(`${r.line}\n`);
    if (r.missing !== null) {
      process.stderr.write(`kb-export mirror: ${r.missing}\n`);
      process.exitCode = 4;
    }
  } catch (err) {
    process.stderr.write(`kb-export mirror: ${(err as Error).message}\n`);
    process.exitCode = err instanceof BackupError ? err.exitCode : 1;
  }
}
