/**
 * `kb-export mirror`: a knowledge base as a folder of Markdown (or HTML) pages that a later run
 * keeps in sync (issue 42, D12). Each run brings `DIR/.kb-export/export.ndjson` up to date with
 * the incremental backup (`backup --incremental`: only the delta since the kept change token
 * travels; a full export when there is no token, it expired (410) or the file no longer matches),
 * with `--media` saves the media into `DIR/media/` with the backup's own downloader, and then
 * brings the tree to that file (render.ts), writing only what differs. The export file and its
 * token move together, atomically (the backup's guarantee); the tree is derived from the file and
 * its index moves last, so a run killed anywhere is completed by the next one.
 * Exit codes: 0 done, 1 failed, 2 usage (DIR not a mirror, or one of another book or format),
 * 3 key refused or book not found, 4 done but some media are missing.
 */
import { availableParallelism } from 'node:os';
import { existsSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { exportUrl } from '../backup/backup-command.js';
import { BackupError } from '../backup/backup-error.js';
import { manifestEntries, readManifestHead } from '../backup/manifest-read.js';
import { manifestFileOf } from '../backup/manifest.js';
import { runFileBackup } from '../backup/media-backup.js';
import { MediaUrls } from '../backup/media-path.js';
import { ConvertPool, DEFAULT_BUDGET, type ConvertBudget } from './convert-pool.js';
import { removeStale } from './files.js';
import { commitRun } from './git.js';
import { MediaLinks } from './page.js';
import { renderMirror, type RenderCounts } from './render.js';
import { StateDir, type MirrorState } from './state.js';

/** `kb-export mirror`'s options. */
export interface MirrorOptions {
  server: string;
  book: string;
  out: string;
  format: 'markdown' | 'html';
  media: boolean;
  git: boolean;
  retries: number;
  timeoutS: number;
  quiet: boolean;
  keyFile?: string;
  mediaConcurrency: number;
  mediaTimeoutS: number;
  /** The converter's budget per page (convert-pool.ts). */
  budget?: ConvertBudget;
}

/** What a page's bytes depend on besides its document and path; a new value renders every page again. */
const RENDER_VERSION = 1;

/** Refuses a DIR that holds files but is no mirror, or a mirror of another book or format. Throws BackupError (2). */
async function checkDir(o: MirrorOptions, state: StateDir): Promise<MirrorState | null> {
  const names = await readdir(o.out).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[];
    throw new BackupError(`--out ${o.out} cannot be read: ${err.message}`, 2);
  });
  // A repository made ahead for --git is welcome: .git alone is not a stranger's file.
  if (names.some((n) => n !== '.git') && !names.includes('.kb-export'))
    throw new BackupError(
      `--out ${o.out} holds files but is not a mirror (no .kb-export/ in it): use a new or empty folder`,
      2,
    );
  let previous: MirrorState | null;
  try {
    previous = await state.readState();
  } catch (err) {
    throw new BackupError(`${(err as Error).message}: remove ${state.root} to mirror again from scratch`, 2);
  }
  if (previous !== null && (previous.book !== o.book || previous.format !== o.format))
    throw new BackupError(
      `--out ${o.out} mirrors the book "${previous.book}" as ${previous.format}: use another folder for --book ${o.book} --format ${o.format}`,
      2,
    );
  return previous;
}

/** Runs the mirror; resolves with the final line (and whether media are missing). Throws BackupError. */
export async function runMirror(
  o: MirrorOptions,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ line: string; missing: string | null }> {
  const state = new StateDir(path.resolve(o.out));
  const previous = await checkDir(o, state);
  exportUrl({ server: o.server, book: o.book, includeCategories: true, html: true });
  const started = Date.now();
  const existed = existsSync(state.dir);
  const fresh = !existsSync(state.root);
  await state.prepare().catch((err: Error) => {
    throw new BackupError(`cannot write in --out ${o.out}: ${err.message}`, 1);
  });
  await noteMediaOff(o, state, previous).catch((err: Error) => {
    throw new BackupError(`the media of the last run cannot be listed: ${err.message}`, 1);
  });
  const outcome = await download(o, state, log, env).catch(async (err: unknown) => {
    // A first run that got no export leaves nothing behind: bad input changes nothing.
    if (fresh) await rm(existed ? state.root : state.dir, { recursive: true, force: true });
    throw err;
  });
  if (!o.quiet) log(outcome.line.replaceAll('\n', '; '));
  return render(o, state, previous, outcome, started, log);
}

/**
 * With `--media` switched off, the media files the last run saved (the backup's manifest lists
 * them) are noted before this run's backup writes a manifest without them. Files under `media/`
 * that the manifest never listed are not the mirror's and stay.
 */
async function noteMediaOff(o: MirrorOptions, state: StateDir, previous: MirrorState | null): Promise<void> {
  if (o.media || previous === null || existsSync(state.mediaOffFile)) return;
  if ((JSON.parse(previous.render) as { media?: boolean }).media !== true) return;
  if (!existsSync(manifestFileOf(state.exportFile))) return;
  await state.noteMediaOff(
    (async function* () {
      for await (const e of manifestEntries(state.exportFile)) if ('sha256' in e) yield `media/${e.path}`;
    })(),
  );
}

/** Removes the media files noted by noteMediaOff once no page links them (the run is committed). Throws the file system's errors. */
async function removeMediaOff(o: MirrorOptions, state: StateDir): Promise<void> {
  if (!existsSync(state.mediaOffFile)) return;
  if (!o.media) await removeStale(state.dir, state.mediaOff(), state.dirs);
  await state.dirs.flush();
  await rm(state.mediaOffFile, { force: true });
}

/** The export file brought up to date by the incremental backup, with the media for --media. Throws BackupError. */
function download(
  o: MirrorOptions,
  state: StateDir,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv,
): Promise<{ line: string; missing: string | null }> {
  const backupLog = (line: string) => {
    if (/\b410\b/.test(line))
      log(
        `the kept change token expired (410 CHANGE_TOKEN_EXPIRED): the whole knowledge base is read again; pages whose bytes do not change are left as they are`,
      );
    else if (!o.quiet) log(line);
  };
  return runFileBackup(
    {
      server: o.server,
      book: o.book,
      out: state.exportFile,
      format: 'ndjson',
      includeCategories: true,
      html: true,
      ifChanged: false,
      incremental: true,
      retries: o.retries,
      timeoutS: o.timeoutS,
      quiet: o.quiet,
      ...(o.keyFile !== undefined ? { keyFile: o.keyFile } : {}),
      ...(o.media ? { mediaDir: path.join(state.dir, 'media') } : {}),
      mediaConcurrency: o.mediaConcurrency,
      mediaRefresh: false,
      mediaTimeoutS: o.mediaTimeoutS,
    },
    backupLog,
    env,
  );
}

/** The tree brought to the export file, then --git; resolves with the final line. Throws BackupError. */
async function render(
  o: MirrorOptions,
  state: StateDir,
  previous: MirrorState | null,
  outcome: { missing: string | null },
  started: number,
  log: (line: string) => void,
): Promise<{ line: string; missing: string | null }> {
  const head = await readManifestHead(state.exportFile).catch(() => null);
  const prefix = head?.head.mediaPrefix ?? null;
  const links = new MediaLinks(
    prefix === null ? null : new MediaUrls(prefix, o.server),
    o.media ? path.join(state.dir, 'media') : null,
  );
  const next: MirrorState = {
    book: o.book,
    format: o.format,
    render: JSON.stringify({ v: RENDER_VERSION, media: o.media, prefix, server: new URL(o.server).origin }),
  };
  const size = Math.max(1, Math.min(4, availableParallelism()));
  const pool = new ConvertPool(size, o.budget ?? DEFAULT_BUDGET);
  let counts: RenderCounts;
  try {
    let reported = Date.now();
    const progress = (done: number, total: number) => {
      if (o.quiet || Date.now() - reported < 5000) return;
      reported = Date.now();
      log(`pages: ${done} of ${total}`);
    };
    counts = await renderMirror({ state, next, previous, links, pool, window: size * 4, log, progress });
    await removeMediaOff(o, state);
  } catch (err) {
    throw new BackupError(`the mirror could not be written: ${(err as Error).message}; the next run completes it`, 1);
  } finally {
    await pool.close();
  }
  const summary = describe(counts);
  let line = `mirror: ${summary} in ${((Date.now() - started) / 1000).toFixed(1)} s (${counts.unchanged} unchanged${counts.fallbacks > 0 ? `, ${counts.fallbacks} kept as HTML` : ''})`;
  if (o.git) {
    const commit = await commitRun(state.dir, `kb-export mirror: ${summary}`, `Book ${o.book} from ${o.server}.`).catch(
      (err: Error) => {
        throw new BackupError(`the mirror was written, but git failed: ${err.message}`, 1);
      },
    );
    line += commit === null ? '; git: nothing to commit' : `; git: committed ${commit}`;
  }
  return { line, missing: outcome.missing };
}

/** "2 added, 1 changed, 0 moved, 3 deleted". */
export function describe(c: RenderCounts): string {
  return `${c.added} added, ${c.changed} changed, ${c.moved} moved, ${c.deleted} deleted`;
}
