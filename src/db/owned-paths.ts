/**
 * Checks that a folder or file on disk is ours before we load code, binaries, passwords or data
 * from it. On a shared host any local user can create a path first at a name we would use (in
 * /tmp, /var/tmp, …) and wait for us to trust it; mkdir then lstat, refusing symbolic links,
 * other owners and group/other permissions, closes that door. A path that fails is refused with
 * an UnsafePathError naming it and the problem, never used or repaired.
 */
import type { Stats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

class UnsafePathError extends Error {
  override name = 'UnsafePathError';
  constructor(
    readonly path: string,
    problem: string,
  ) {
    super(`refusing to use ${path}: ${problem}`);
  }
}

/** Who must own a path: a uid and the group new folders get (for chown when running as root). */
export interface Owner {
  uid: number;
  gid: number;
}

/** Mode bits that must be clear: PRIVATE for data and secrets, NOT_WRITABLE for shared binaries. */
export const PRIVATE = 0o077;
export const NOT_WRITABLE = 0o022;

/**
 * lstats `p` and throws UnsafePathError unless it is a `kind` (not a symbolic link) owned by
 * `uid` with none of the `forbidden` mode bits. Other lstat errors (ENOENT, …) are thrown as is.
 */
export async function checkOwned(p: string, kind: 'directory' | 'file', uid: number, forbidden: number): Promise<Stats> {
  const st = await fs.lstat(p);
  if (st.isSymbolicLink()) throw new UnsafePathError(p, 'it is a symbolic link');
  if (kind === 'directory' ? !st.isDirectory() : !st.isFile()) throw new UnsafePathError(p, `it is not a ${kind}`);
  if (st.uid !== uid) throw new UnsafePathError(p, `it is owned by uid ${st.uid}, not by uid ${uid}`);
  if ((st.mode & forbidden) !== 0) {
    const mode = (st.mode & 0o7777).toString(8).padStart(4, '0');
    const want = forbidden === PRIVATE ? 'group and others must have no access (0700)' : 'group and others must not write to it';
    throw new UnsafePathError(p, `its mode is ${mode}; ${want}`);
  }
  return st;
}

/**
 * A folder only `owner` can use (mode 0700): created if missing (its parent must exist), then
 * checked whether we created it or found it, so a folder someone else made first is refused.
 */
export async function ensurePrivateDir(dir: string, owner: Owner): Promise<void> {
  const created = await fs.mkdir(dir, { mode: 0o700 }).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') return false;
      throw err;
    },
  );
  if (created && owner.uid !== process.getuid?.()) await fs.chown(dir, owner.uid, owner.gid);
  await checkOwned(dir, 'directory', owner.uid, PRIVATE);
}

/**
 * A folder that only we (root: the only caller) can write and everyone can read and search
 * (0755), for files another user (the postgres user) must execute. Every ancestor, symbolic links
 * resolved, must be ours too and not writable by group or others: otherwise its owner could swap
 * our folder for theirs. Missing folders are created with mkdir, then checked like the others.
 */
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
