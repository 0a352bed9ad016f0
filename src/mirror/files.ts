/**
 * How a mirror touches its tree: a file is replaced only when its bytes differ, through a
 * temporary file in `.kb-export/tmp/`, fsynced, and a rename, so an untouched file keeps its bytes
 * and mtime, and a written one is whole after a crash;
 * files no document uses any more go, then the folders they leave empty (D14.4). Large files
 * (SUMMARY.md of a million pages) are written and compared a chunk at a time.
 */
import { mkdir, open, readFile, rename, rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { syncDir } from '../backup/output.js';
import { SortedSpill } from '../backup/sorted-spill.js';

/** Folders whose entries changed since they were last fsynced. */
const DIRS_HELD = 256;

/** Where a page is written before its rename, and the folders a run changed: the run's state (state.ts). */
export interface WriteScratch {
  tempName(): string;
  readonly dirs: DirSync;
}

/**
 * Folders whose entries a run changed (a page renamed in, a file removed), fsynced before the
 * index says the run is done: a crash after it never finds an old file back, or a new one missing,
 * that the index does not list. Synced when DIRS_HELD gather, so memory stays bounded (D14.4).
 */
export class DirSync {
  private dirs = new Set<string>();

  /** Notes that `dir`'s entries changed. */
  async touched(dir: string): Promise<void> {
    this.dirs.add(dir);
    if (this.dirs.size >= DIRS_HELD) await this.flush();
  }

  /** Fsyncs every folder noted. */
  async flush(): Promise<void> {
    const dirs = [...this.dirs];
    this.dirs.clear();
    for (const d of dirs) await syncDir(d);
  }
}

/** Writes `bytes` to a new file `tmp` and fsyncs it, as the backup writes its files. Throws the file system's errors. */
async function writeSynced(tmp: string, write: (h: Awaited<ReturnType<typeof open>>) => Promise<void>): Promise<void> {
  const handle = await open(tmp, 'wx', 0o644);
  try {
    await write(handle);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Replaces `file` with `bytes` when it holds anything else (a temporary file renamed over it); true when written. */
export async function writeIfDifferent(state: WriteScratch, file: string, bytes: Buffer): Promise<boolean> {
  const current = await readFile(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
    if (err.code === 'EISDIR') throw new Error(`${file} is a folder, where the mirror puts a page`);
    throw err;
  });
  if (current !== null && current.equals(bytes)) return false;
  await mkdir(path.dirname(file), { recursive: true });
  const tmp = state.tempName();
  // Synced before the rename: a crash never leaves a page renamed in but empty or cut short.
  await writeSynced(tmp, async (h) => void (await h.writeFile(bytes)));
  await rename(tmp, file);
  await state.dirs.touched(path.dirname(file));
  return true;
}

/** writeIfDifferent for bytes given in parts (`chunks`), never all in memory; true when written. */
export async function writePartsIfDifferent(
  state: WriteScratch,
  file: string,
  chunks: Iterable<string>,
): Promise<boolean> {
  const tmp = state.tempName();
  await writeSynced(tmp, async (out) => {
    let buffered = '';
    for (const c of chunks) {
      buffered += c;
      if (buffered.length >= 1 << 16) {
        await out.write(buffered);
        buffered = '';
      }
    }
    await out.write(buffered);
  });
  if (await sameBytes(tmp, file)) {
    await rm(tmp, { force: true });
    return false;
  }
  await mkdir(path.dirname(file), { recursive: true });
  await rename(tmp, file);
  await state.dirs.touched(path.dirname(file));
  return true;
}

/** Whether files `a` and `b` hold the same bytes (false when `b` is missing), read 64 KB at a time. */
async function sameBytes(a: string, b: string): Promise<boolean> {
  const fb = await open(b, 'r').catch(() => null);
  if (fb === null) return false;
  const fa = await open(a, 'r');
  try {
    const [sa, sb] = await Promise.all([fa.stat(), fb.stat()]);
    if (!sb.isFile() || sa.size !== sb.size) return false;
    const ba = Buffer.alloc(1 << 16);
    const bb = Buffer.alloc(1 << 16);
    for (let at = 0; at < sa.size; at += ba.length) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, ba.length, at), fb.read(bb, 0, bb.length, at)]);
      if (ra.bytesRead !== rb.bytesRead || !ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead)))
        return false;
    }
    return true;
  } finally {
    await fa.close();
    await fb.close();
  }
}

/** Removes the files of the mirror named by `stale`, then the folders that left empty (never DIR itself); their folders noted in `dirs`. */
export async function removeStale(dir: string, stale: AsyncIterable<string>, dirs: DirSync): Promise<void> {
  // Folders deepest first, each once, sorted on disk: a run may delete a million pages.
  const folders = new SortedSpill<string>({
    compare: (a, b) => b.split('/').length - a.split('/').length || (a < b ? -1 : a > b ? 1 : 0),
    same: (a, b) => a === b,
  });
  try {
    for await (const rel of stale) {
      await rm(path.join(dir, ...rel.split('/')), { force: true });
      await dirs.touched(path.dirname(path.join(dir, ...rel.split('/'))));
      for (let f = path.posix.dirname(rel); f !== '.'; f = path.posix.dirname(f)) await folders.add(f, f.length + 8);
    }
    for await (const f of folders.sorted()) {
      await dirs.touched(path.dirname(path.join(dir, ...f.split('/'))));
      await rmdir(path.join(dir, ...f.split('/'))).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST' && err.code !== 'ENOENT' && err.code !== 'ENOTDIR')
          throw err;
      });
    }
  } finally {
    await folders.close();
  }
}
