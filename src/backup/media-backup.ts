/**
 * `kb-export backup` for a file, with what it keeps beside the export: after the export is written
 * (backup-command.ts), `PATH.manifest.json` and `PATH.sha256` (manifest.ts), and with
 * `--media-dir DIR` every media file the export names under its `Export-Media-Prefix`. The media
 * URLs are read back from the written file one document at a time (media-scan.ts), sorted and
 * deduplicated in bounded memory (sorted-spill.ts), matched in that order with the last manifest's
 * entries (a file still there with the size and SHA-256 listed is not fetched again, unless
 * `--media-refresh`), fetched at a bounded concurrency (media-fetch.ts) into DIR (media-store.ts),
 * and listed in the manifest in that same order. A media file that cannot be fetched is listed
 * with why, and the command exits 4 (the export saved, N media missing), not 1 (DIR or the
 * manifest unwritable). A `--if-changed` 304 keeps the manifest as it is (D3, D13.3).
 */
import { once } from 'node:events';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Agent } from 'undici';
import { apiKey, runBackup } from './backup-command.js';
import { BackupError } from './backup-error.js';
import type { AttemptResult, WrittenFile } from './download.js';
import { decompressed } from './export-reader.js';
import {
  ManifestWriter,
  ManifestError,
  isKept,
  refOfEntry,
  manifestFileOf,
  sumsFileOf,
  type ManifestHead,
  type MediaEntry,
} from './manifest.js';
import { manifestEntries, readManifestHead } from './manifest-read.js';
import { fetchMedia, type MediaFetchOptions } from './media-fetch.js';
import { compareRefs, keyCompare, MediaUrls, type MediaRef } from './media-path.js';
import { mediaScanner } from './media-scan.js';
import { MediaDir, MediaStoreError, RefusedPath } from './media-store.js';
import { SortedSpill } from './sorted-spill.js';

/** The backup's options (backup-command.ts) and the media ones. */
export type FileBackupOptions = Omit<Parameters<typeof runBackup>[0], 'onWritten'> & {
  /** `--media-dir`: save the export's media below this folder. */
  mediaDir?: string;
  /** Media fetched at once (1-64). */
  mediaConcurrency: number;
  /** Fetch every media file again, even one the last manifest lists as it is on disk. */
  mediaRefresh: boolean;
  /** The longest wait for a media server's answer, or for more of its body, seconds. */
  mediaTimeoutS: number;
};

/** The final line to print, and, when media are missing, the message that goes with exit code 4. */
export interface FileBackupOutcome {
  line: string;
  missing: string | null;
}

type Written = Extract<AttemptResult, { kind: 'written' }>;

/** At most this many media fetched at once, whatever --media-concurrency asks. */
export const MAX_MEDIA_CONCURRENCY = 64;

/**
 * Runs the backup, then keeps its manifest, checksums and media. Throws BackupError: 2 for usage
 * (media options without a file, PATH inside DIR), 1 when the manifest or DIR cannot be written
 * (the export itself is saved), and whatever runBackup throws.
 */
export async function runFileBackup(
  o: FileBackupOptions,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Promise<FileBackupOutcome> {
  if (o.mediaDir !== undefined && o.out === '-')
    throw new BackupError('--media-dir needs a file (--out PATH): the media URLs are read back from it', 2);
  if (o.mediaRefresh && o.mediaDir === undefined) throw new BackupError('--media-refresh goes with --media-dir', 2);
  if (
    !Number.isSafeInteger(o.mediaConcurrency) ||
    o.mediaConcurrency < 1 ||
    o.mediaConcurrency > MAX_MEDIA_CONCURRENCY
  ) {
    throw new BackupError(`--media-concurrency must be 1 to ${MAX_MEDIA_CONCURRENCY}`, 2);
  }
  if (o.mediaTimeoutS < 1) throw new BackupError('--media-timeout must be at least 1 second', 2);
  if (o.mediaDir !== undefined) {
    const dir = path.resolve(o.mediaDir);
    const out = path.resolve(o.out);
    if (out === dir || out.startsWith(dir + path.sep))
      throw new BackupError(
        `--out ${o.out} is inside --media-dir ${o.mediaDir}: a media path could name it; keep the export beside the folder`,
        2,
      );
  }
  let written: Written | null = null;
  const line = await runBackup({ ...o, onWritten: (r) => (written = r) }, log, env);
  const w = written as Written | null;
  // Standard output has nothing beside it; a 304 keeps the manifest of the file it left alone.
  if (o.out === '-' || w === null || w.file === undefined) return { line, missing: null };
  const key = o.mediaDir === undefined ? '' : await apiKey(o, env);
  const kept = await keepBeside(o, w, w.file, key, log);
  return { line: `${line}\n${kept.line}`, missing: kept.missing };
}

interface MediaStats {
  fetched: number;
  fetchedBytes: number;
  reused: number;
}

async function keepBeside(
  o: FileBackupOptions,
  w: Written,
  file: WrittenFile,
  key: string,
  log: (line: string) => void,
): Promise<FileBackupOutcome> {
  const started = Date.now();
  const names = `${manifestFileOf(o.out)} and ${sumsFileOf(o.out)}`;
  const previous = await readManifestHead(o.out).catch((err: Error) => {
    if (!o.quiet) log(`${err.message}: a new one is written`);
    return null;
  });
  // Unchanged content keeps its bytes: a token or ETag of the same file is not news.
  const same =
    previous !== null && previous.head.export.sha256 === file.sha256 && previous.head.export.bytes === w.fileBytes;
  const folder = path.dirname(path.resolve(o.out));
  const noPrefix = o.mediaDir !== undefined && file.mediaPrefix === null;
  const mediaDir =
    o.mediaDir === undefined || noPrefix
      ? null
      : path.relative(folder, path.resolve(o.mediaDir)).split(path.sep).join('/');
  const head: ManifestHead = {
    book: o.book,
    options: { format: o.format, includeCategories: o.includeCategories, html: o.html },
    changeToken: same ? previous.head.changeToken : file.changeToken,
    etag: same ? previous.head.etag : w.etag,
    export: { file: path.basename(o.out), bytes: w.fileBytes, sha256: file.sha256, documents: w.documents },
    mediaPrefix: file.mediaPrefix,
    mediaDir,
  };
  let writer: ManifestWriter;
  try {
    writer = await ManifestWriter.open(o.out, head);
  } catch (err) {
    throw new BackupError(`the export was saved, but ${names} could not be written: ${(err as Error).message}`, 1);
  }
  let stats: MediaStats = { fetched: 0, fetchedBytes: 0, reused: 0 };
  let changed: { manifest: boolean; sums: boolean };
  try {
    if (mediaDir !== null) {
      const reuse =
        previous !== null &&
        previous.head.mediaDir === mediaDir &&
        previous.head.mediaPrefix === file.mediaPrefix &&
        !o.mediaRefresh;
      stats = await saveMedia(o, file.mediaPrefix!, key, reuse, writer, log);
    }
    changed = await writer.commit();
  } catch (err) {
    await writer.abort();
    if (err instanceof BackupError) throw err;
    const what =
      err instanceof MediaStoreError ? err.message : `${names} could not be written: ${(err as Error).message}`;
    throw new BackupError(`the export was saved, but ${what}`, 1);
  }
  if (noPrefix)
    throw new BackupError(
      `the export was saved, but the server sent no Export-Media-Prefix (a kb-export before D13.3): its media cannot be told apart, none were saved`,
      1,
    );
  const kept = changed.manifest || changed.sums ? 'written' : 'unchanged';
  if (mediaDir === null) return { line: `${names} ${kept}`, missing: null };
  const t = writer.totals();
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const line =
    `media: ${t.files} files, ${t.bytes} bytes in ${o.mediaDir} (${stats.fetched} fetched, ${stats.fetchedBytes} bytes; ${stats.reused} already there), ` +
    `${t.missing} missing, in ${seconds} s; ${names} ${kept}`;
  const missing =
    t.missing === 0
      ? null
      : `the export was saved, but ${t.missing} media ${t.missing === 1 ? 'is' : 'are'} missing (listed in ${manifestFileOf(o.out)} with why)`;
  return { line, missing };
}

/** The last manifest's entries, walked once in order beside the new refs. */
class PreviousEntries {
  private next: MediaEntry | null = null;
  private last: MediaEntry | null = null;

  constructor(private iterator: AsyncIterator<MediaEntry | { bad: string; index: number }> | null) {}

  /** The previous entry of `ref`'s path or URL, or null. */
  async find(ref: MediaRef): Promise<MediaEntry | null> {
    for (;;) {
      if (this.next === null) {
        if (this.iterator === null) return null;
        let step;
        try {
          step = await this.iterator.next();
        } catch {
          step = { done: true as const, value: undefined };
        }
        if (step.done === true) {
          this.iterator = null;
          return null;
        }
        const e = step.value;
        if ('bad' in e) continue;
        // A list out of order was edited: what follows cannot be matched by walking it.
        if (this.last !== null && compareRefs(refOfEntry(this.last), refOfEntry(e)) > 0) {
          await this.iterator.return?.();
          this.iterator = null;
          return null;
        }
        this.next = e;
      }
      const c = keyCompare(refOfEntry(this.next), ref);
      if (c > 0) return null;
      this.last = this.next;
      this.next = null;
      if (c === 0) return this.last;
    }
  }
}

async function saveMedia(
  o: FileBackupOptions,
  prefix: string,
  key: string,
  reuse: boolean,
  writer: ManifestWriter,
  log: (line: string) => void,
): Promise<MediaStats> {
  let media: MediaUrls;
  try {
    media = new MediaUrls(prefix, o.server);
  } catch {
    throw new BackupError(
      `the export was saved, but its Export-Media-Prefix "${prefix}" is no URL: no media were saved`,
      1,
    );
  }
  const store = await MediaDir.open(o.mediaDir!);
  // What bounds memory here: one run of the spill (sorted-spill.ts), the media list's window of
  // results waiting for an earlier one, and one document of the export at a time.
  const spill = new SortedSpill<MediaRef>({ compare: compareRefs, same: (a, b) => keyCompare(a, b) === 0 });
  const stats: MediaStats = { fetched: 0, fetchedBytes: 0, reused: 0 };
  const abort = new AbortController();
  const agent = new Agent({ connections: o.mediaConcurrency, connect: { timeout: o.mediaTimeoutS * 1000 } });
  const fetchOptions: MediaFetchOptions = {
    key,
    serverOrigin: new URL(o.server).origin,
    retries: o.retries,
    timeoutMs: o.mediaTimeoutS * 1000,
    dispatcher: agent,
    signal: abort.signal,
  };
  let done = 0;
  let lastReport = Date.now();
  const previous = new PreviousEntries(reuse ? manifestEntries(o.out)[Symbol.asyncIterator]() : null);
  try {
    await pipeline(
      decompressed(o.out),
      mediaScanner(o.format, media, (url) => spill.add(media.refOf(url), 2 * url.length + 64)),
    );
    const work = async function* () {
      for await (const ref of spill.sorted())
        yield { ref, before: ref.path === null ? null : await previous.find(ref) };
    };
    await orderedPool(
      work(),
      o.mediaConcurrency,
      abort,
      ({ ref, before }) => saveOne(ref, before, media, store, fetchOptions, stats),
      async (entry) => {
        await writer.add(entry);
        done++;
        if (o.quiet || Date.now() - lastReport < 5000) return;
        lastReport = Date.now();
        const t = writer.totals();
        log(
          `media: ${done} done (${stats.fetched} fetched, ${(stats.fetchedBytes / 1e6).toFixed(1)} MB), ${t.missing} missing`,
        );
      },
    );
    await store.sync();
  } catch (err) {
    if (err instanceof ManifestError) throw new BackupError(`the export was saved, but ${err.message}`, 1);
    if (err instanceof MediaStoreError || err instanceof BackupError) throw err;
    throw new MediaStoreError(`its media could not be listed: ${(err as Error).message}`);
  } finally {
    abort.abort();
    await spill.close();
    await agent.close().catch(() => {});
  }
  return stats;
}

/** One media ref to its manifest entry: reused when still on disk as listed, else fetched, else missing with why. Throws MediaStoreError. */
async function saveOne(
  ref: MediaRef,
  before: MediaEntry | null,
  media: MediaUrls,
  store: MediaDir,
  o: MediaFetchOptions,
  stats: MediaStats,
): Promise<MediaEntry> {
  if (ref.path === null) return { path: null, url: ref.url, missing: ref.why ?? 'not a media path', status: null };
  const rel = ref.path;
  const missing = (why: string, status: number | null = null): MediaEntry => ({
    path: rel,
    url: ref.url,
    missing: why,
    status,
  });
  if (before !== null && isKept(before) && (await store.hashOf(rel, before.bytes)) === before.sha256) {
    stats.reused++;
    return { ...before, url: ref.url };
  }
  try {
    await store.place(rel, false);
  } catch (err) {
    if (err instanceof RefusedPath) return missing(err.message);
    throw err;
  }
  const r = await fetchMedia(media.fetchUrl(ref.url)!, o, () => store.temp());
  if (!r.ok) return missing(r.why, r.status);
  try {
    await store.commit(r.temp, rel);
  } catch (err) {
    await r.temp.discard();
    if (err instanceof RefusedPath) return missing(err.message);
    throw err;
  }
  stats.fetched++;
  stats.fetchedBytes += r.bytes;
  return { path: rel, url: ref.url, bytes: r.bytes, sha256: r.sha256, contentType: r.contentType };
}

/**
 * Runs `work` on each item, at most `concurrency` at once, and hands the results to `emit` in the
 * items' order; at most WINDOW_PER_SLOT × concurrency results wait for an earlier one. The first
 * failure aborts `abort`, waits for the rest to settle and is thrown.
 */
async function orderedPool<I, R>(
  items: AsyncIterable<I>,
  concurrency: number,
  abort: AbortController,
  work: (item: I) => Promise<R>,
  emit: (result: R) => Promise<void>,
): Promise<void> {
  const window = WINDOW_PER_SLOT * concurrency;
  const queue: { promise: Promise<R>; settled: boolean }[] = [];
  let running = 0;
  const freed = new EventTarget();
  let failure: { err: unknown } | null = null;
  const drain = async (all: boolean) => {
    while (queue.length > 0 && (all || queue.length >= window || queue[0]!.settled))
      await emit(await queue.shift()!.promise);
  };
  try {
    for await (const item of items) {
      if (failure !== null) break;
      while (running >= concurrency) await once(freed, 'free');
      if (failure !== null) break;
      running++;
      const slot = { promise: null as unknown as Promise<R>, settled: false };
      slot.promise = work(item).finally(() => {
        slot.settled = true;
        running--;
        freed.dispatchEvent(new Event('free'));
      });
      slot.promise.catch((err: unknown) => {
        failure ??= { err };
        abort.abort();
      });
      queue.push(slot);
      await drain(false);
    }
    await drain(true);
  } catch (err) {
    abort.abort();
    await Promise.allSettled(queue.map((q) => q.promise));
    throw err;
  }
  if (failure !== null) throw (failure as { err: unknown }).err;
}

const WINDOW_PER_SLOT = 32;
