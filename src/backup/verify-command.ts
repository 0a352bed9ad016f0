/**
 * `kb-export verify PATH`: a backup checked against what it says of itself, without the server (in
 * the spirit of pg_verifybackup). The export is read once: its bytes hashed and counted against
 * `PATH.manifest.json`, decompressed and checked whole as a download is (verify.ts: well-formed,
 * `success` true, `meta.count` equal to the documents, the manifest's document count), and its
 * media URLs collected (media-scan.ts) into a sorted spill (sorted-spill.ts). Then the manifest's
 * media list and those URLs are walked together, both in compareRefs order: every listed file must
 * be in DIR with its size and SHA-256, every URL of the export must be a listed file or a listed
 * failure, and nothing may be listed that the export does not name; `PATH.sha256` must say what
 * the manifest says. Each problem is one line; memory holds one document, one spill run and one
 * entry at a time, whatever the backup's size.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BackupError } from './backup-error.js';
import { decoder, teeTo } from './body-streams.js';
import {
  isKept,
  ManifestError,
  manifestFileOf,
  refOfEntry,
  sumLine,
  sumsFileOf,
  type ManifestHead,
  type MediaEntry,
  type MediaSummary,
} from './manifest.js';
import { manifestEntries, readManifestHead } from './manifest-read.js';
import { compareRefs, keyCompare, MediaUrls, type MediaRef } from './media-path.js';
import { mediaScanner } from './media-scan.js';
import { MediaDir } from './media-store.js';
import { fileEncodingOf } from './output.js';
import { fileSha256 } from './record.js';
import { SortedSpill } from './sorted-spill.js';
import { bodyVerifier, incompleteReason, type BackupFormat } from './verify.js';

export interface VerifyOptions {
  /** The export file, PATH. */
  file: string;
  /** DIR, when it is not where the manifest says (its `mediaDir`, relative to PATH's folder). */
  mediaDir?: string;
}

/** What verify found: problems (each also given to `problem`) and a line that sums the backup up. */
export interface VerifyResult {
  problems: number;
  line: string;
}

/** At most this many problems are printed one by one; the rest are counted. */
const PRINTED_PROBLEMS = 1000;
/** Media files checked at once: one at a time, a folder of small files waited on the disk for each. */
const CHECKS_AT_ONCE = 16;

/**
 * Verifies the backup at `o.file`, telling `problem` each problem found, one line each. Throws
 * BackupError (2) when PATH is `-` or is not a file to begin with.
 */
export async function verifyBackup(o: VerifyOptions, problem: (line: string) => void): Promise<VerifyResult> {
  if (o.file === '-') throw new BackupError('verify needs the backup file, not -', 2);
  let problems = 0;
  const report = (line: string) => {
    if (++problems === PRINTED_PROBLEMS + 1) problem('… more problems, not listed one by one');
    if (problems <= PRINTED_PROBLEMS) problem(line);
  };
  const exists = await stat(o.file).catch(() => null);
  if (exists === null || !exists.isFile()) throw new BackupError(`${o.file}: no such file`, 2);
  let head: ManifestHead | null = null;
  let summary: MediaSummary | null = null;
  try {
    const read = await readManifestHead(o.file);
    head = read?.head ?? null;
    summary = read?.summary ?? null;
    if (head === null)
      report(`${manifestFileOf(o.file)}: missing (nothing to verify ${o.file} against but its own framing)`);
  } catch (err) {
    report((err as Error).message);
  }
  if (head !== null && head.export.file !== path.basename(o.file))
    report(`${manifestFileOf(o.file)}: describes ${head.export.file}, not ${path.basename(o.file)}`);
  const format: BackupFormat =
    head?.options.format ?? (/\.(ndjson|jsonl)(\.(gz|br|zst))?$/.test(o.file) ? 'ndjson' : 'json');
  const withMedia = head !== null && head.mediaDir !== null && head.mediaPrefix !== null;
  const media = withMedia ? mediaUrlsOf(head!, report) : null;
  const spill = new SortedSpill<MediaRef>({ compare: compareRefs, same: (a, b) => keyCompare(a, b) === 0 });
  try {
    const { documents, readThrough } = await checkExport(o.file, format, head, media, spill, report);
    let line = `${o.file}: ${documents ?? '?'} documents`;
    if (head !== null) {
      const sums = await SumsChecker.open(o.file, report);
      await sums.expect(sumLine(head.export.sha256, head.export.file));
      if (media !== null) {
        const dir = o.mediaDir ?? path.resolve(path.dirname(path.resolve(o.file)), head.mediaDir!);
        // An export that could not be read through named only some of its URLs: the files are still checked.
        const m = await checkMedia(o.file, dir, head, readThrough ? spill : null, sums, report);
        if (
          summary === null ||
          summary.files !== m.files ||
          summary.bytes !== m.bytes ||
          summary.missing !== m.missing
        ) {
          report(
            `${manifestFileOf(o.file)}: its summary (${JSON.stringify(summary)}) is not what its media list holds (${JSON.stringify(m)})`,
          );
        }
        line += `, ${m.files} media files (${m.bytes} bytes) in ${dir}, ${m.missing} listed as missing`;
      }
      await sums.end();
    }
    return {
      problems,
      line: problems === 0 ? `verified ${line}` : `${line}: ${problems} problem${problems === 1 ? '' : 's'}`,
    };
  } finally {
    await spill.close();
  }
}

function mediaUrlsOf(head: ManifestHead, report: (line: string) => void): MediaUrls | null {
  try {
    return new MediaUrls(head.mediaPrefix!, null);
  } catch {
    report(`${head.export.file}: its media prefix "${head.mediaPrefix}" is no URL: media not checked`);
    return null;
  }
}

/**
 * Reads PATH once: size and SHA-256 against the manifest, the body whole, its media URLs into
 * `spill`. Resolves with the documents counted (null unless whole) and whether it was read through.
 */
async function checkExport(
  file: string,
  format: BackupFormat,
  head: ManifestHead | null,
  media: MediaUrls | null,
  spill: SortedSpill<MediaRef>,
  report: (line: string) => void,
): Promise<{ documents: number | null; readThrough: boolean }> {
  const hash = createHash('sha256');
  let bytes = 0;
  const hashing = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      bytes += chunk.length;
      cb(null, chunk);
    },
  });
  const verifier = bodyVerifier(format);
  let read: { sha256: string; bytes: number } | null = null;
  let readThrough = false;
  try {
    const encoding = fileEncodingOf(file);
    const stages = [createReadStream(file), hashing, decoder(encoding ?? 'identity')] as const;
    if (media !== null) {
      const verified = new Promise<void>((resolve, reject) => verifier.once('finish', resolve).once('error', reject));
      await pipeline(
        ...stages,
        teeTo(verifier, verified),
        mediaScanner(format, media, (url) => spill.add(media.refOf(url), 2 * url.length + 64)),
      );
    } else await pipeline(...stages, verifier);
    read = { sha256: hash.digest('hex'), bytes };
    readThrough = true;
  } catch (err) {
    report(`${file}: not a whole export: ${(err as Error).message}`);
  }
  // A body that could not be read through is hashed on its own, so a changed byte is still named.
  read ??= { sha256: await fileSha256(file), bytes: (await stat(file)).size };
  let documents: number | null = null;
  const verdict = verifier.verdict();
  const why = incompleteReason(verdict);
  if (readThrough && why !== null) report(`${file}: not a whole export: ${why}`);
  else if (readThrough) documents = verdict.documents;
  if (head === null) return { documents, readThrough };
  if (read.bytes !== head.export.bytes) report(`${file}: ${read.bytes} bytes, the manifest says ${head.export.bytes}`);
  if (read.sha256 !== head.export.sha256)
    report(`${file}: SHA-256 ${read.sha256}, the manifest says ${head.export.sha256}`);
  if (documents !== null && documents !== head.export.documents)
    report(`${file}: ${documents} documents, the manifest says ${head.export.documents}`);
  return { documents, readThrough };
}

/** `PATH.sha256` read line by line beside the lines the manifest implies; the first difference is one problem. */
class SumsChecker {
  private n = 0;
  private done = false;

  private constructor(
    private readonly sums: string,
    private readonly lines: AsyncIterator<string> | null,
    private readonly report: (line: string) => void,
  ) {}

  static async open(file: string, report: (line: string) => void): Promise<SumsChecker> {
    const sums = sumsFileOf(file);
    if ((await stat(sums).catch(() => null)) === null) {
      report(`${sums}: missing`);
      return new SumsChecker(sums, null, report);
    }
    return new SumsChecker(
      sums,
      createInterface({ input: createReadStream(sums), crlfDelay: Infinity })[Symbol.asyncIterator](),
      report,
    );
  }

  /** The next line should be `want` (with its newline). */
  async expect(want: string): Promise<void> {
    if (this.lines === null || this.done) return;
    this.n++;
    const got = await this.lines.next();
    if (got.done === true) this.fail(`ends at line ${this.n}, the manifest lists more`);
    else if (`${got.value}\n` !== want) this.fail(`line ${this.n} is not what the manifest says (${want.trimEnd()})`);
  }

  /** No line should be left. */
  async end(): Promise<void> {
    if (this.lines === null) return;
    if (!this.done && (await this.lines.next()).done !== true) this.fail('more lines than the manifest lists');
    await this.lines.return?.();
  }

  private fail(why: string): void {
    this.done = true;
    this.report(`${this.sums}: ${why}`);
  }
}

/**
 * Walks the manifest's media list beside the export's sorted media URLs (none to compare with when
 * `spill` is null), checking each file in DIR and `PATH.sha256` as it goes.
 */
async function checkMedia(
  file: string,
  dir: string,
  head: ManifestHead,
  spill: SortedSpill<MediaRef> | null,
  sums: SumsChecker,
  report: (line: string) => void,
): Promise<MediaSummary> {
  const totals: MediaSummary = { files: 0, bytes: 0, missing: 0 };
  const checks = new OrderedChecks(CHECKS_AT_ONCE, report);
  const store = await MediaDir.existing(dir);
  if (store === null) report(`${dir}: missing, or not a folder: no media file can be checked`);
  const entries = manifestEntries(file)[Symbol.asyncIterator]();
  const refs = spill?.sorted()[Symbol.asyncIterator]() ?? null;
  const nextEntry = async (): Promise<MediaEntry | { bad: string; index: number } | null> => {
    try {
      const step = await entries.next();
      return step.done === true ? null : step.value;
    } catch (err) {
      report(err instanceof ManifestError ? err.message : `${manifestFileOf(file)}: ${(err as Error).message}`);
      return null;
    }
  };
  const nextRef = async () => {
    if (refs === null) return null;
    const step = await refs.next();
    return step.done === true ? null : step.value;
  };
  try {
    let ref = await nextRef();
    let entry = await nextEntry();
    let last: MediaEntry | null = null;
    let index = 0;
    while (ref !== null || entry !== null) {
      if (entry !== null && 'bad' in entry) {
        await checks.now(`${manifestFileOf(file)}: media entry ${entry.index} is ${entry.bad}`);
        entry = await nextEntry();
        index++;
        continue;
      }
      if (entry !== null && last !== null && compareRefs(refOfEntry(last), refOfEntry(entry)) >= 0) {
        await checks.now(
          `${manifestFileOf(file)}: media entry ${index} (${entry.path ?? entry.url}) is out of order or repeated: the rest of the list is not checked`,
        );
        break;
      }
      const c = ref === null ? 1 : entry === null ? -1 : keyCompare(ref, refOfEntry(entry));
      if (c < 0) {
        await checks.now(`${ref!.url}: a media URL of the export that ${manifestFileOf(file)} does not list`);
        ref = await nextRef();
        continue;
      }
      if (c > 0 && refs !== null)
        await checks.now(
          `${entry!.path ?? entry!.url}: listed in ${manifestFileOf(file)} but no media URL of the export names it`,
        );
      else ref = await nextRef();
      const e = entry!;
      last = e;
      index++;
      if (isKept(e)) {
        totals.files++;
        totals.bytes += e.bytes;
        await sums.expect(sumLine(e.sha256, `${head.mediaDir}/${e.path}`));
        if (store !== null) await checks.add(checkFile(store, dir, e));
      } else totals.missing++;
      entry = await nextEntry();
    }
    await checks.drain();
  } finally {
    await entries.return?.(undefined);
    await refs?.return?.(undefined);
  }
  return totals;
}

/** A listed media file in DIR: its problem, or null when it has the manifest's size and SHA-256. */
async function checkFile(
  store: MediaDir,
  dir: string,
  e: Extract<MediaEntry, { sha256: string }>,
): Promise<string | null> {
  const where = path.join(dir, e.path);
  const found = await store.hashAt(e.path, e.bytes);
  if ('why' in found) return `${where}: ${found.why}`;
  if ('size' in found) return `${where}: ${found.size} bytes, the manifest says ${e.bytes}`;
  return found.sha256 === e.sha256 ? null : `${where}: SHA-256 ${found.sha256}, the manifest says ${e.sha256}`;
}

/**
 * Up to `width` file checks at once, their problems reported in the order the checks were added;
 * a problem found on the spot waits for the checks before it, so the lines come in list order.
 */
class OrderedChecks {
  readonly #queue: Promise<{ line: string | null } | { error: unknown }>[] = [];

  constructor(
    private readonly width: number,
    private readonly report: (line: string) => void,
  ) {}

  /** Adds a running check; waits for the oldest when `width` are running. */
  async add(check: Promise<string | null>): Promise<void> {
    // Settled into a value at once, so a failure waiting in the queue is never an unhandled rejection.
    this.#queue.push(
      check.then(
        (line) => ({ line }),
        (error: unknown) => ({ error }),
      ),
    );
    if (this.#queue.length >= this.width) await this.#next();
  }

  /** Reports `line` after the problems of every check added before it. */
  async now(line: string): Promise<void> {
    await this.drain();
    this.report(line);
  }

  /** Waits for every check, reporting their problems. Throws what a check threw. */
  async drain(): Promise<void> {
    while (this.#queue.length > 0) await this.#next();
  }

  async #next(): Promise<void> {
    const done = await this.#queue.shift()!;
    if ('error' in done) throw done.error;
    if (done.line !== null) this.report(done.line);
  }
}
