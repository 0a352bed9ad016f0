/**
 * What a file backup keeps beside `PATH` so that it can be checked without kb-export:
 * `PATH.manifest.json`, the export (book, options, change token, ETag, the file's bytes, SHA-256
 * and documents) and each media file of `--media-dir` (path, URL, bytes, SHA-256, content type, or
 * why it is missing), one media entry a line, in the order of media-path.ts's compareRefs; and
 * `PATH.sha256`, the same hashes in `sha256sum` format, paths relative to PATH's folder, for
 * `sha256sum -c` and `rclone checksum`. Both are written as the entries come (memory holds none of
 * them) to temporary files beside PATH, fsynced, and renamed over the old ones only when their
 * bytes differ: an unchanged backup leaves both files, and their mtimes, as they were. The
 * manifest is read back by the next backup and by `kb-export verify` (manifest-read.ts).
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { syncDir } from './output.js';
import type { MediaRef } from './media-path.js';
import type { TokenOptions } from './record.js';

/** The manifest's version, its first key. */
export const MANIFEST_VERSION = 1;

/** The manifest beside a backup file PATH: `PATH.manifest.json`. */
export const manifestFileOf = (file: string) => `${file}.manifest.json`;
/** The checksums beside a backup file PATH, in `sha256sum` format: `PATH.sha256`. */
export const sumsFileOf = (file: string) => `${file}.sha256`;

/** The export file as the manifest describes it. */
export interface ExportEntry {
  /** PATH's name, relative to its folder. */
  file: string;
  /** PATH's size on disk (compressed when it is), bytes. */
  bytes: number;
  /** SHA-256 of PATH's bytes, lowercase hex. */
  sha256: string;
  documents: number;
}

/** Everything in the manifest but its media list. */
export interface ManifestHead {
  book: string;
  options: Omit<TokenOptions, 'book'>;
  changeToken: string | null;
  etag: string | null;
  export: ExportEntry;
  /** The response's Export-Media-Prefix, or null when the server sent none. */
  mediaPrefix: string | null;
  /** `--media-dir`, relative to PATH's folder with `/` separators; null without media (and `media` is null). */
  mediaDir: string | null;
}

/** Totals of the media list. */
export interface MediaSummary {
  files: number;
  bytes: number;
  missing: number;
}

/** A media file kept, or one that is missing (`path` null: its URL could not name a file below DIR). */
export type MediaEntry =
  | { path: string; url: string; bytes: number; sha256: string; contentType: string | null }
  | { path: string | null; url: string; missing: string; status: number | null };

/** Whether an entry is a file kept in DIR (rather than one missing). */
export const isKept = (e: MediaEntry): e is Extract<MediaEntry, { sha256: string }> => 'sha256' in e;

/** An entry as the order of compareRefs sees it. */
export const refOfEntry = (e: MediaEntry): MediaRef => ({ path: e.path, url: e.url });

/** A manifest that cannot be read as one. */
export class ManifestError extends Error {}

/** A `sha256sum` line: two spaces (text mode); a name with `\`, a line feed or a carriage return escaped as GNU coreutils does. */
export function sumLine(sha256: string, name: string): string {
  if (!/[\\\n\r]/.test(name)) return `${sha256}  ${name}\n`;
  return `\\${sha256}  ${name.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/\r/g, '\\r')}\n`;
}

/** The head's JSON text up to the media list, in a fixed key order (so equal backups give equal bytes). */
function headText(h: ManifestHead): string {
  const head = {
    kbExportManifest: MANIFEST_VERSION,
    book: h.book,
    options: { format: h.options.format, includeCategories: h.options.includeCategories, html: h.options.html },
    changeToken: h.changeToken,
    etag: h.etag,
    export: { file: h.export.file, bytes: h.export.bytes, sha256: h.export.sha256, documents: h.export.documents },
    mediaPrefix: h.mediaPrefix,
    mediaDir: h.mediaDir,
  };
  return JSON.stringify(head).slice(0, -1);
}

function entryText(e: MediaEntry): string {
  return JSON.stringify(
    isKept(e)
      ? { path: e.path, url: e.url, bytes: e.bytes, sha256: e.sha256, contentType: e.contentType }
      : { path: e.path, url: e.url, missing: e.missing, status: e.status },
  );
}

/** A file written in pieces under a temporary name beside its final one. */
class PendingFile {
  private chunks: string[] = [];
  private size = 0;

  private constructor(
    readonly file: string,
    readonly tmp: string,
    private readonly handle: FileHandle,
  ) {}

  static async open(file: string): Promise<PendingFile> {
    const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
    // Private like the backup and its other records (output.ts): it names the book and its change token.
    return new PendingFile(file, tmp, await open(tmp, 'wx', 0o600));
  }

  async write(text: string): Promise<void> {
    this.chunks.push(text);
    this.size += text.length;
    if (this.size >= 64 * 1024) await this.flush();
  }

  private async flush(): Promise<void> {
    const text = this.chunks.join('');
    this.chunks = [];
    this.size = 0;
    if (text !== '') await this.handle.write(text);
  }

  /** Fsyncs and closes it; renames it over the final file when their bytes differ (true), else removes it. */
  async finish(): Promise<boolean> {
    await this.flush();
    await this.handle.sync();
    await this.handle.close();
    if (await sameBytes(this.tmp, this.file)) {
      await rm(this.tmp, { force: true });
      return false;
    }
    await rename(this.tmp, this.file);
    return true;
  }

  async abort(): Promise<void> {
    await this.handle.close().catch(() => {});
    await rm(this.tmp, { force: true }).catch(() => {});
  }
}

/** Whether two files hold the same bytes (false when either is missing), read as streams. */
async function sameBytes(a: string, b: string): Promise<boolean> {
  const [sa, sb] = await Promise.all([stat(a).catch(() => null), stat(b).catch(() => null)]);
  if (sa === null || sb === null || !sb.isFile() || sa.size !== sb.size) return false;
  const ra = createReadStream(a, { highWaterMark: 1 << 16 })[Symbol.asyncIterator]();
  const rb = createReadStream(b, { highWaterMark: 1 << 16 });
  let pending: Buffer = Buffer.alloc(0);
  try {
    for await (const chunk of rb) {
      let theirs = chunk as Buffer;
      while (theirs.length > 0) {
        if (pending.length === 0) {
          const next = await ra.next();
          if (next.done) return false;
          pending = next.value as Buffer;
        }
        const n = Math.min(pending.length, theirs.length);
        if (!pending.subarray(0, n).equals(theirs.subarray(0, n))) return false;
        pending = pending.subarray(n);
        theirs = theirs.subarray(n);
      }
    }
    return pending.length === 0 && (await ra.next()).done === true;
  } finally {
    rb.destroy();
    await ra.return?.();
  }
}

/**
 * Writes a manifest and its `.sha256` beside PATH: the head first, then `add` each media entry in
 * order, then `commit`. Nothing replaces the old files before `commit`; `abort` removes the
 * temporary ones. File system errors are thrown as they are.
 */
export class ManifestWriter {
  private first = true;
  private readonly summary: MediaSummary = { files: 0, bytes: 0, missing: 0 };

  private constructor(
    private readonly head: ManifestHead,
    private readonly manifest: PendingFile,
    private readonly sums: PendingFile,
  ) {}

  /** Opens both temporary files and writes the head and the export's checksum line. */
  static async open(out: string, head: ManifestHead): Promise<ManifestWriter> {
    const manifest = await PendingFile.open(manifestFileOf(out));
    const sums = await PendingFile.open(sumsFileOf(out)).catch(async (err: Error) => {
      await manifest.abort();
      throw err;
    });
    const w = new ManifestWriter(head, manifest, sums);
    try {
      await manifest.write(`${headText(head)},"media":${head.mediaDir === null ? 'null' : '['}`);
      await sums.write(sumLine(head.export.sha256, head.export.file));
    } catch (err) {
      await w.abort();
      throw err;
    }
    return w;
  }

  /** Adds a media entry (in compareRefs order). */
  async add(e: MediaEntry): Promise<void> {
    await this.manifest.write(`${this.first ? '\n' : ',\n'}${entryText(e)}`);
    this.first = false;
    if (isKept(e)) {
      this.summary.files++;
      this.summary.bytes += e.bytes;
      await this.sums.write(sumLine(e.sha256, `${this.head.mediaDir}/${e.path}`.replace(/^\.\//, '')));
    } else this.summary.missing++;
  }

  /** The totals so far. */
  totals(): MediaSummary {
    return { ...this.summary };
  }

  /** Ends both files and renames each over the old one where its bytes differ; resolves with which changed. */
  async commit(): Promise<{ manifest: boolean; sums: boolean }> {
    const list = this.head.mediaDir === null ? '' : `${this.first ? '' : '\n'}]`;
    const s = this.summary;
    await this.manifest.write(`${list},"summary":{"files":${s.files},"bytes":${s.bytes},"missing":${s.missing}}}\n`);
    const sums = await this.sums.finish();
    const manifest = await this.manifest.finish();
    if (sums || manifest) await syncDir(path.dirname(path.resolve(this.manifest.file)));
    return { manifest, sums };
  }

  async abort(): Promise<void> {
    await this.manifest.abort();
    await this.sums.abort();
  }
}
