/** Paths checked to be ours before anything is taken from them, on a shared host (docs/architecture.md). */
import { constants, type Stats } from 'node:fs';
import fs, { type FileHandle } from 'node:fs/promises';
import path from 'node:path';

export class UnsafePathError extends Error {
  override name = 'UnsafePathError';
  constructor(
    readonly path: string,
    problem: string,
  ) {
    super(`refusing to use ${path}: ${problem}`);
  }
}

export interface Owner {
  uid: number;
  gid: number;
}

/** Mode bits that must be clear: PRIVATE for data and secrets, NOT_WRITABLE for shared binaries. */
export const PRIVATE = 0o077;
export const NOT_WRITABLE = 0o022;

/** Throws UnsafePathError unless `p` is a `kind`, not a link, of `uid`, without `forbidden` bits. */
export async function checkOwned(
  p: string,
  kind: 'directory' | 'file',
  uid: number,
  forbidden: number,
): Promise<Stats> {
  const st = await fs.lstat(p);
  if (st.isSymbolicLink()) throw new UnsafePathError(p, 'it is a symbolic link');
  return checkStats(p, st, kind, uid, forbidden);
}

function checkStats(p: string, st: Stats, kind: 'directory' | 'file', uid: number, forbidden: number): Stats {
  if (kind === 'directory' ? !st.isDirectory() : !st.isFile()) throw new UnsafePathError(p, `it is not a ${kind}`);
  if (st.uid !== uid) throw new UnsafePathError(p, `it is owned by uid ${st.uid}, not by uid ${uid}`);
  if ((st.mode & forbidden) !== 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
    const want =
      forbidden === PRIVATE ? 'group and others must have no access (0700)' : 'group and others must not write to it';
    throw new UnsafePathError(p, `its mode is ${mode}; ${want}`);
  }
  return st;
}

/** A 0700 folder of `owner`, created if missing (not its parent), checked either way on an open handle. */
export async function ensurePrivateDir(dir: string, owner: Owner): Promise<void> {
  const created = await fs.mkdir(dir, { mode: 0o700 }).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') return false;
      throw err;
    },
  );
  const handle = await openNoFollow(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    if (created && owner.uid !== process.getuid?.()) await handle.chown(owner.uid, owner.gid);
    checkStats(dir, await handle.stat(), 'directory', owner.uid, PRIVATE);
  } finally {
    await handle.close();
  }
}

/** Opens file `p` (O_NOFOLLOW) and checks it as checkOwned does on the handle: what is read was checked. */
export async function openOwnedFile(p: string, uid: number, forbidden: number): Promise<FileHandle> {
  // O_NONBLOCK: opening a FIFO planted at `p` would otherwise wait for a writer.
  const handle = await openNoFollow(p, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    checkStats(p, await handle.stat(), 'file', uid, forbidden);
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** A symbolic link at `p`, or with O_DIRECTORY anything but a folder, is an UnsafePathError. */
export async function openNoFollow(p: string, flags: number, mode?: number): Promise<FileHandle> {
  try {
    return await fs.open(p, flags | constants.O_NOFOLLOW, mode);
  } catch (err) {
    // A link says ELOOP (EMLINK on FreeBSD), or ENOTDIR with O_DIRECTORY.
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ELOOP' && code !== 'EMLINK' && code !== 'ENOTDIR') throw err;
    const st = await fs.lstat(p).catch(() => undefined);
    if (st?.isSymbolicLink()) throw new UnsafePathError(p, 'it is a symbolic link');
    if (st && code === 'ENOTDIR' && !st.isDirectory()) throw new UnsafePathError(p, 'it is not a directory');
    throw err;
  }
}

/** A 0755 folder only root (the only caller) can write, its ancestors too, for what the postgres user runs. */
export async function ensureSharedReadOnlyDir(dir: string): Promise<void> {
  const uid = process.getuid?.() ?? 0;
  const { existing, missing } = await splitExisting(path.resolve(dir));
  const parts = (await fs.realpath(existing)).split(path.sep).filter(Boolean);
  let p: string = path.sep;
  await checkOwned(p, 'directory', uid, NOT_WRITABLE);
  for (const name of parts) {
    p = path.join(p, name);
    await checkOwned(p, 'directory', uid, NOT_WRITABLE);
  }
  for (const name of missing) {
    p = path.join(p, name);
    await fs.mkdir(p, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    const st = await checkOwned(p, 'directory', uid, NOT_WRITABLE);
    // A umask such as 077 would leave it unsearchable by the postgres user.
    if ((st.mode & 0o755) !== 0o755) await fs.chmod(p, 0o755);
  }
}

/**
 * The folders above `p`, from `/` down following links, missing ones made 0755: each root's or ours,
 * and writable by no one else unless sticky.
 */
export async function ensureSafeParents(p: string): Promise<void> {
  const me = process.getuid?.() ?? 0;
  const names = path.resolve(p).split(path.sep).filter(Boolean);
  names.pop();
  let cur: string = path.sep;
  checkParent(cur, await fs.lstat(cur), me, p);
  let links = 0;
  while (names.length > 0) {
    const name = names.shift()!;
    if (name === '.') continue;
    if (name === '..') {
      cur = path.dirname(cur);
      continue;
    }
    const next = path.join(cur, name);
    const st = await lstatOrMkdir(next);
    if (st.isSymbolicLink()) {
      if (st.uid !== 0 && st.uid !== me)
        throw new UnsafePathError(next, `it is a symbolic link owned by uid ${st.uid}, ${notTrusted(me)}`);
      if (++links > 40) throw new UnsafePathError(next, 'too many symbolic links');
      const target = await fs.readlink(next);
      if (path.isAbsolute(target)) cur = path.sep;
      names.unshift(...target.split(path.sep).filter(Boolean));
      continue;
    }
    checkParent(next, st, me, p);
    cur = next;
  }
}

/** The sticky bit (S_ISVTX), which Node's fs.constants lacks. */
const STICKY = 0o1000;

function checkParent(p: string, st: Stats, me: number, below: string): void {
  if (!st.isDirectory()) throw new UnsafePathError(p, 'it is not a directory');
  if (st.uid !== 0 && st.uid !== me) throw new UnsafePathError(p, `it is owned by uid ${st.uid}, ${notTrusted(me)}`);
  if ((st.mode & NOT_WRITABLE) !== 0 && (st.mode & STICKY) === 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
    throw new UnsafePathError(
      p,
      `its mode is ${mode}; a folder above ${below} must not be writable by group or others unless it is sticky (as /tmp is)`,
    );
  }
}

function notTrusted(me: number): string {
  return me === 0 ? 'not by root' : `not by root or uid ${me}`;
}

async function lstatOrMkdir(p: string): Promise<Stats> {
  try {
    return await fs.lstat(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await fs.mkdir(p, { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  return fs.lstat(p);
}

/** The longest existing prefix of absolute path `p`, and the names below it that do not exist. */
async function splitExisting(p: string): Promise<{ existing: string; missing: string[] }> {
  const missing: string[] = [];
  let cur = p;
  for (;;) {
    try {
      await fs.lstat(cur);
      return { existing: cur, missing };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || cur === path.dirname(cur)) throw err;
      missing.unshift(path.basename(cur));
      cur = path.dirname(cur);
    }
  }
}
