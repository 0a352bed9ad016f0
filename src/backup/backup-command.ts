/**
 * `kb-export backup`: a verified export written to PATH atomically (output.ts), retried while it
 * can still succeed. Exit codes (README "Backups"): 0 written or unchanged, 1 failed after its
 * retries or PATH unwritable, 2 usage, 3 refused (401, 404, 400). 429 and 503 wait for Retry-After
 * with jitter; cut bodies and connection errors back off from 1 s to 30 s. The key comes from
 * KB_EXPORT_API_KEY or --key-file, never argv.
 */
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { attemptBackup } from './download.js';
import { fileEncodingOf, hasZstd } from './output.js';
import { attemptIncremental, type IncrementalResult } from './incremental.js';
import { currentEtag, currentToken, type TokenOptions } from './record.js';
import { OutputError } from './output.js';
import { attemptResume, ResumeSpool } from './resume.js';
import type { BackupFormat } from './verify.js';
import { progressReporter } from '../observe/progress.js';

interface BackupOptions {
  server: string;
  book: string;
  out: string;
  format: BackupFormat;
  includeCategories: boolean;
  html: boolean;
  ifChanged: boolean;
  /** Merge the delta since PATH.token into PATH (incremental.ts). */
  incremental?: boolean;
  retries: number;
  timeoutS: number;
  /** Compression in transit for a plain PATH (--compressed). */
  compressed?: boolean;
  quiet: boolean;
  keyFile?: string;
  /** Told of each export written, before the final line (media-backup.ts keeps the manifest and media beside it). */
  onWritten?: (result: Extract<IncrementalResult, { kind: 'written' }>) => void;
}

import { BackupError } from './backup-error.js';

const RETRY_AFTER_CAP_S = 60;
const BACKOFF_MAX_MS = 30_000;

/** The key: from --key-file (first line) or KB_EXPORT_API_KEY. Throws BackupError (2) when there is none. */
export async function apiKey(o: Pick<BackupOptions, 'keyFile'>, env: NodeJS.ProcessEnv): Promise<string> {
  if (o.keyFile !== undefined) {
    const text = await readFile(o.keyFile, 'utf8').catch(() => {
      throw new BackupError(`cannot read the key file ${o.keyFile}`, 2);
    });
    const key = text.split('\n', 1)[0]!.trim();
    if (key === '') throw new BackupError(`the key file ${o.keyFile} is empty`, 2);
    return key;
  }
  const key = env.KB_EXPORT_API_KEY?.trim();
  if (!key)
    throw new BackupError(
      'no API key: set KB_EXPORT_API_KEY or pass --key-file FILE (never the key itself on the command line)',
      2,
    );
  return key;
}

/** The export's URL for the options; throws BackupError (2) for a --server that is not an http(s) URL. */
export function exportUrl(o: Pick<BackupOptions, 'server' | 'book' | 'includeCategories' | 'html'>): string {
  let base: URL;
  try {
    base = new URL(o.server);
  } catch {
    throw new BackupError(`--server must be a URL such as http://127.0.0.1:3000, got "${o.server}"`, 2);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:')
    throw new BackupError('--server must be an http:// or https:// URL', 2);
  const url = new URL(`${base.pathname.replace(/\/$/, '')}/api/v1/open/books/${encodeURIComponent(o.book)}/docs`, base);
  url.searchParams.set('excludeCategories', String(!o.includeCategories));
  url.searchParams.set('includeContentHtml', String(o.html));
  return url.toString();
}

/** Runs the backup; resolves with the final line to print. Throws BackupError. */
export async function runBackup(
  o: BackupOptions,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  if (o.out === '-' && o.ifChanged) throw new BackupError('--if-changed needs a file: it keeps the ETag beside it', 2);
  if (o.out === '-' && o.incremental)
    throw new BackupError('--incremental needs a file: it merges the changes into it', 2);
  if (o.ifChanged && o.incremental)
    throw new BackupError(
      '--incremental and --if-changed do not go together: an incremental backup already downloads only what changed',
      2,
    );
  const key = await apiKey(o, env);
  const url = exportUrl(o);
  if (fileEncodingOf(o.out) === 'zstd' && !hasZstd())
    throw new BackupError(`--out ${o.out}: .zst needs a Node.js with zstd (22.15 or later)`, 2);
  let etag: string | null = null;
  if (o.ifChanged) {
    const current = await currentEtag(o.out);
    etag = current.etag;
    if (current.why !== null && !o.quiet) log(current.why);
  }
  const tokenOptions: TokenOptions = {
    book: o.book,
    format: o.format,
    includeCategories: o.includeCategories,
    html: o.html,
  };
  let token: string | null = null;
  if (o.incremental) {
    const current = await currentToken(o.out, tokenOptions);
    token = current.token;
    if (current.why !== null && !o.quiet) log(current.why);
  }
  const started = Date.now();
  let lastBytes = 0;
  let lastReport = Date.now();
  // On a terminal a bar; elsewhere (cron, CI) a plain line every 5 s.
  const bar = !o.quiet && process.stderr.isTTY ? progressReporter('backup: bytes received', 0) : null;
  const onBytes = (bytes: number) => {
    lastBytes = bytes;
    bar?.update(bytes);
    if (bar !== null || o.quiet || Date.now() - lastReport < 5000) return;
    lastReport = Date.now();
    log(`${(bytes / 1e6).toFixed(1)} MB in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  };
  let failures = 0;
  let resume: ResumeSpool | null = null;
  let cuts = 0;
  try {
    for (;;) {
      lastBytes = 0;
      let added = 0;
      let result: IncrementalResult;
      if (resume !== null) {
        const keepToken = o.incremental ? tokenOptions : null;
        const r = await attemptResume(
          {
            url,
            key,
            format: o.format,
            out: o.out,
            timeoutS: o.timeoutS,
            keepToken,
            onBytes,
            compressed: o.compressed ?? false,
          },
          resume,
        );
        [result, added] = [r, r.added];
      } else if (token !== null) {
        result = await attemptIncremental({
          url,
          key,
          format: o.format,
          out: o.out,
          token,
          options: tokenOptions,
          timeoutS: o.timeoutS,
          onBytes,
        });
      } else {
        const keepToken = o.incremental ? tokenOptions : null;
        result = await attemptBackup({
          url,
          key,
          format: o.format,
          out: o.out,
          etag,
          keepEtag: o.ifChanged,
          keepToken,
          timeoutS: o.timeoutS,
          compressed: o.compressed ?? false,
          onBytes,
        });
      }
      bar?.stop();
      if (result.kind === 'fallback') {
        if (!o.quiet) log(result.why);
        token = null;
        await resume?.remove();
        resume = null;
        continue;
      }
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      if (result.kind === 'written') {
        o.onWritten?.(result);
        return writtenLine(o.out, result, seconds, cuts);
      }
      if (result.kind === 'unwritable')
        throw new BackupError(
          `backup failed: ${result.reason}; ${o.out === '-' ? 'the output is incomplete' : `${o.out} was left as it was`}`,
          1,
        );
      if (result.kind === 'unchanged')
        return `unchanged: ${o.out} is current (ETag ${result.etag}), nothing downloaded`;
      if (result.kind === 'refused' && [400, 401, 404].includes(result.status)) {
        throw new BackupError(`the server refused the export: ${result.status} ${result.code}: ${result.message}`, 3);
      }
      if (result.kind === 'broken' && result.cut !== undefined) {
        // The whole documents received are kept: the next attempt asks for the rest (D13.2).
        const spool = await ResumeSpool.fromCut(o.out, o.format, result.cut).catch((err: unknown) => {
          if (err instanceof OutputError)
            throw new BackupError(`backup failed: ${err.message}; ${o.out} was left as it was`, 1);
          throw err;
        });
        if (spool.documents > 0) [resume, added] = [spool, spool.documents];
        else await spool.remove();
      }
      const why =
        result.kind === 'refused'
          ? `${result.status} ${result.code}${result.message ? `: ${result.message}` : ''}`
          : `${result.reason} (after ${lastBytes} bytes)`;
      // Bytes already on standard output cannot be taken back: no second attempt after them.
      if (o.out === '-' && lastBytes > 0) throw new BackupError(`backup failed: ${why}; the output is incomplete`, 1);
      // An attempt that moved the export forward starts the back-off again: ten cuts cost seconds.
      if (added > 0) failures = 0;
      if (failures >= o.retries)
        throw new BackupError(
          `backup failed after ${failures + 1} attempt(s): ${why}; ${o.out === '-' ? 'the output is incomplete' : `${o.out} was left as it was`}`,
          1,
        );
      failures++;
      const waitMs =
        result.kind === 'refused' && result.retryAfterS !== null
          ? Math.min(result.retryAfterS, RETRY_AFTER_CAP_S) * 1000 * (1 + Math.random() / 2)
          : Math.min(BACKOFF_MAX_MS, 1000 * 2 ** (failures - 1));
      if (resume !== null && added > 0) {
        cuts++;
        if (!o.quiet)
          log(
            `cut after ${resume.documents} documents (${why}); resuming after document ${resume.last === null ? '-' : resume.last.id} in ${(waitMs / 1000).toFixed(1)} s`,
          );
      } else if (!o.quiet) log(`attempt ${failures} failed: ${why}; retrying in ${(waitMs / 1000).toFixed(1)} s`);
      await sleep(waitMs);
    }
  } finally {
    await resume?.remove();
  }
}

/** The last line of a backup that wrote its file. */
function writtenLine(
  out: string,
  result: Extract<IncrementalResult, { kind: 'written' }>,
  seconds: string,
  cuts: number,
): string {
  if (cuts > 0) {
    const d = result.delta;
    const delta =
      d === undefined ? '' : `, made one snapshot with a delta of ${d.changed} changed or new and ${d.removed} removed`;
    return `wrote ${out}: ${result.documents} documents, ${result.bytes} bytes (${result.fileBytes} on disk) in ${seconds} s, resumed after ${cuts} cut(s)${delta}`;
  }
  if (result.delta !== undefined) {
    const d = result.delta;
    return `merged ${out}: ${result.documents} documents, ${result.bytes} bytes (${result.fileBytes} on disk) from a delta of ${d.changed} changed or new and ${d.removed} removed (${d.bytes} bytes) in ${seconds} s`;
  }
  const onDisk =
    result.fileBytes === result.bytes
      ? ''
      : ` (${result.fileBytes} on disk, ${result.fromServer !== null ? `${result.fromServer} as the server sent it` : 'compressed here'})`;
  return `wrote ${out}: ${result.documents} documents, ${result.bytes} bytes${onDisk} in ${seconds} s, ETag ${result.etag ?? 'none'}`;
}
