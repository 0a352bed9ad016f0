/**
 * The media folder (`--media-dir DIR`), written so that nothing lands outside it whatever the
 * names: a media path (media-path.ts: segments already refused when empty, `.`, `..` or holding
 * `/`, `\` or NUL) is walked segment by segment below DIR's real path, each folder created when
 * missing and checked with lstat, so a symbolic link already in DIR (to a folder or a file) is
 * refused, never followed. A file arrives in a temporary file at DIR's top (opened O_EXCL and
 * O_NOFOLLOW), is hashed as it is written, fsynced, and renamed to its place only once whole;
 * the folders it went into are fsynced before the manifest names it. DIR itself may be a link
 * (the user's choice); what is below it is the server's, not trusted. Two errors: `RefusedPath`, one media item that cannot be kept (listed as missing), and
 * `MediaStoreError`, DIR that cannot be written at all (a full disk, no permission on DIR, a
 * read-only file system): the command stops, as a backup does when PATH cannot be written.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, lstatSync, openSync, read, readSync } from 'node:fs';
import type { Stats } from 'node:fs';
import { lstat, mkdir, open, realpath, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { syncDir, writeAll } from './output.js';

/** One media item that cannot be kept where its path says (a link or a file in the way, a name the file system refuses). */
export class RefusedPath extends Error {}

/** DIR cannot be written at all: retrying the next item cannot help. */
export class MediaStoreError extends Error {}

/** File system errors that say DIR as a whole cannot take files, not that one name is bad. */
const FATAL_CODES = new Set(['ENOSPC', 'EDQUOT', 'EROFS', 'EIO']);

/** A file written under a temporary name, its bytes counted and hashed. */
export interface TempFile {
  readonly path: string;
  /**
   * Writes `body` to it; resolves with its size (bytes) and SHA-256 (hex) once written and fsynced.
   * Rejects with the body's error, MediaStoreError (DIR cannot take it) or RefusedPath (this file cannot be written).
   */
  write(body: AsyncIterable<unknown>): Promise<{ bytes: number; sha256: string }>;
  /** Removes it. Never throws. */
  discard(): Promise<void>;
}

/** Folders whose entries changed since their last fsync; synced in groups of this many, and before the manifest. */
const PENDING_SYNCS = 256;
/** Folders remembered as walked; the set starts again when full (media come sorted, so a folder's files come together). */
const KNOWN_FOLDERS = 1024;

/** `DIR`, opened (created when missing). */
export class MediaDir {
  private pendingSync = new Set<string>();
  /** Folders below DIR this run walked and found plain (no link), or made: not walked again. */
  private readonly known = new Set<string>();

  private constructor(readonly root: string) {}

  /** Creates DIR when missing and resolves its real path. Throws MediaStoreError. */
  static async open(dir: string): Promise<MediaDir> {
    try {
      await mkdir(dir, { recursive: true });
      const root = await realpath(dir);
      if (!(await lstat(root)).isDirectory()) throw new Error('not a folder');
      return new MediaDir(root);
    } catch (err) {
      throw new MediaStoreError(`cannot use --media-dir ${dir}: ${(err as Error).message}`);
    }
  }

  /** DIR as it is, for reading only (`kb-export verify`): null when it is missing or no folder. */
  static async existing(dir: string): Promise<MediaDir | null> {
    const root = await realpath(dir).catch(() => null);
    if (root === null || !(await lstat(root)).isDirectory()) return null;
    return new MediaDir(root);
  }

  /**
   * Media path `rel` checked against a listed `size`: its SHA-256 (hex) when it is a regular file of
   * that size under plain folders, else what differs (`size`) or is wrong (`why`: missing, a link,
   * not a regular file, unreadable). The file is opened without following a link and judged on its
   * descriptor: one path lookup, where an lstat and then an open made two (thousands of small files
   * checked by verify and by an unchanged backup). Throws MediaStoreError only.
   */
  async hashAt(rel: string, size: number): Promise<{ sha256: string } | { size: number } | { why: string }> {
    let target: string | null;
    try {
      target = await this.folderOf(rel, false);
    } catch (err) {
      if (err instanceof RefusedPath) return { why: err.message };
      throw err;
    }
    if (target === null) return { why: 'missing' };
    let fd: number;
    try {
      // Not blocking on a FIFO, not taking a terminal: what is opened is judged before it is read.
      fd = openSync(target, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return { why: 'missing' };
      if (code === 'ELOOP') return { why: `${rel} is a symbolic link` };
      return { why: `unreadable (${(err as Error).message})` };
    }
    try {
      const found = fstatSync(fd);
      if (!found.isFile()) return { why: 'not a regular file' };
      if (found.size !== size) return { size: found.size };
      return { sha256: size <= SMALL_FILE ? smallFileHash(fd) : await largeFileHash(fd, size) };
    } catch (err) {
      return { why: `unreadable (${(err as Error).message})` };
    } finally {
      closeSync(fd);
    }
  }

  /**
   * The absolute path of media path `rel` after its folders were checked (and, with `create`,
   * made); null when a folder is missing and `create` is false. Throws RefusedPath when a segment
   * is a link or a file, MediaStoreError when a folder cannot be made for want of space or access.
   */
  async place(rel: string, create: boolean): Promise<string | null> {
    const found = await this.walk(rel, create);
    if (found === null) return null;
    const s = found.stat;
    if (s?.isSymbolicLink()) throw new RefusedPath(`${rel} is a symbolic link: not replaced`);
    if (s !== null && !s.isFile())
      throw new RefusedPath(`${rel} is ${s.isDirectory() ? 'a folder' : 'not a regular file'}: not replaced`);
    return found.target;
  }

  /**
   * Walks `rel`'s folders below DIR segment by segment with lstat (making missing ones with
   * `create`), then lstats the last segment: its absolute path and what is there (null: nothing),
   * or null when a folder is missing and not made.
   */
  private async walk(rel: string, create: boolean): Promise<{ target: string; stat: Stats | null } | null> {
    const target = await this.folderOf(rel, create);
    if (target === null) return null;
    // Blocking, as the hash of a small file is: a round trip through the thread pool for each
    // file cost more than the call (thousands of small files checked).
    let stat: Stats | null;
    try {
      stat = lstatSync(target, { throwIfNoEntry: false }) ?? null;
    } catch (err) {
      throw classify(err as NodeJS.ErrnoException, rel);
    }
    return { target, stat };
  }

  /**
   * The absolute path of `rel` once its folders were walked (see walk), or null when a folder is
   * missing and not made. A folder this run already walked is not walked again (`known`): the
   * walk is there for the links DIR held before, and nothing but this run writes in DIR while it
   * runs (walking again would not close the gap between a check and a rename anyway).
   */
  private async folderOf(rel: string, create: boolean): Promise<string | null> {
    const names = rel.split('/');
    const folder = path.join(this.root, ...names.slice(0, -1));
    if (!this.known.has(folder)) {
      let at = this.root;
      for (const name of names.slice(0, -1)) {
        at = path.join(at, name);
        const kind = kindOf(at);
        if (kind === 'folder') continue;
        if (kind !== 'missing')
          throw new RefusedPath(
            `${path.relative(this.root, at)} is ${kind === 'link' ? 'a symbolic link' : 'not a folder'}: not followed`,
          );
        if (!create) return null;
        await mkdir(at).catch(async (err: NodeJS.ErrnoException) => {
          // Made meanwhile (by another item of the same folder): fine if it is a folder.
          if (err.code === 'EEXIST' && kindOf(at) === 'folder') return;
          throw classify(err, rel);
        });
        this.touched(path.dirname(at));
      }
      if (this.known.size >= KNOWN_FOLDERS) this.known.clear();
      this.known.add(folder);
    }
    return path.join(folder, names[names.length - 1]!);
  }

  /** The SHA-256 of media path `rel` when it is a regular file of `size` bytes under plain folders (hashAt), else null. */
  async hashOf(rel: string, size: number): Promise<string | null> {
    const found = await this.hashAt(rel, size);
    return 'sha256' in found ? found.sha256 : null;
  }

  /** A new temporary file at DIR's top. Throws MediaStoreError. */
  async temp(): Promise<TempFile> {
    const file = path.join(this.root, `.kb-export-${randomBytes(8).toString('hex')}.tmp`);
    const handle = await open(
      file,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o644,
    ).catch((err: NodeJS.ErrnoException) => {
      throw new MediaStoreError(`cannot write in ${this.root}: ${err.message}`);
    });
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      await handle.close();
    };
    return {
      path: file,
      async write(body) {
        // A loop, not stream.pipeline: a pipeline per file cost an AbortError (with its stack) each.
        const hash = createHash('sha256');
        let bytes = 0;
        for await (const chunk of body) {
          const b = chunk as Buffer;
          hash.update(b);
          bytes += await writeAll(handle, [b]).catch((err: NodeJS.ErrnoException) => {
            throw FATAL_CODES.has(err.code ?? '')
              ? new MediaStoreError(`cannot write in ${file}: ${err.message}`)
              : new RefusedPath(`cannot write in ${file}: ${err.code ?? err.message}`);
          });
        }
        await handle.sync();
        await close();
        return { bytes, sha256: hash.digest('hex') };
      },
      async discard() {
        await close().catch(() => {});
        await rm(file, { force: true }).catch(() => {});
      },
    };
  }

  /**
   * Moves a written temporary file to media path `rel`, its folders checked (and made) again just
   * before. Throws RefusedPath or MediaStoreError; the temporary file is then left to the caller.
   */
  async commit(temp: TempFile, rel: string): Promise<void> {
    const target = (await this.place(rel, true))!;
    await rename(temp.path, target).catch((err: NodeJS.ErrnoException) => {
      throw classify(err, rel);
    });
    this.touched(this.root);
    this.touched(path.dirname(target));
    if (this.pendingSync.size >= PENDING_SYNCS) await this.sync();
  }

  /** Fsyncs the folders whose entries changed, so the renames are durable before the manifest names the files. */
  async sync(): Promise<void> {
    const dirs = [...this.pendingSync];
    this.pendingSync = new Set();
    for (const dir of dirs) await syncDir(dir);
  }

  private touched(dir: string): void {
    this.pendingSync.add(dir);
  }
}

type Kind = 'folder' | 'file' | 'link' | 'other' | 'missing';

/**
 * Blocking, like the file's own lstat: with checks running at once, each had started walking a new
 * folder on the thread pool before the first walk had marked it known.
 */
function kindOf(p: string): Kind {
  try {
    const s = lstatSync(p);
    return s.isSymbolicLink() ? 'link' : s.isDirectory() ? 'folder' : s.isFile() ? 'file' : 'other';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw classify(err as NodeJS.ErrnoException, p);
  }
}

function classify(err: NodeJS.ErrnoException, rel: string): Error {
  if (FATAL_CODES.has(err.code ?? '')) return new MediaStoreError(`cannot write ${rel}: ${err.message}`);
  return new RefusedPath(`cannot write ${rel}: ${err.code ?? err.message}`);
}

/**
 * SHA-256 (hex) of the large regular file open at `fd` (`size` bytes, from its fstat: the buffer's
 * size up to 1 MiB, not a limit), read through the thread pool. Rejects with the read's error.
 */
async function largeFileHash(fd: number, size: number): Promise<string> {
  const buffer = Buffer.allocUnsafe(Math.min(size, 1 << 20));
  const hash = createHash('sha256');
  for (;;) {
    const n = await readAsync(fd, buffer, 0, buffer.length, null);
    if (n === 0) break;
    hash.update(buffer.subarray(0, n));
  }
  return hash.digest('hex');
}

/** fs.read on a descriptor, as a promise of the bytes read. */
const readAsync = (fd: number, buffer: Buffer, offset: number, length: number, position: null) =>
  new Promise<number>((resolve, reject) =>
    read(fd, buffer, offset, length, position, (err, n) => (err ? reject(err) : resolve(n))),
  );

/** Files up to this size (bytes) are hashed with blocking reads: a few microseconds each. */
const SMALL_FILE = 256 * 1024;

/** One buffer for every small file: a new one for each was most of the garbage of a check. */
let smallBuffer: Buffer | null = null;

/**
 * The SHA-256 of the small regular file open at `fd`, read with blocking calls from where it is.
 * A read shorter than asked for is the end of a regular file, so a file that fits the buffer costs
 * one read; one that grew past it is read on.
 */
function smallFileHash(fd: number): string {
  // Blocking calls only, so nothing else uses the buffer until this returns.
  const buffer = (smallBuffer ??= Buffer.allocUnsafe(SMALL_FILE + 1));
  const hash = createHash('sha256');
  for (;;) {
    const n = readSync(fd, buffer, 0, buffer.length, null);
    hash.update(buffer.subarray(0, n));
    if (n < buffer.length) break;
  }
  return hash.digest('hex');
}
