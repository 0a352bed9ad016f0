/** The PostgreSQL of machines with nothing but Node.js, when DATABASE_URL is unset (docs/architecture.md). */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import { freePort } from './free-port.js';
import path from 'node:path';
import { canExecute, installedNativeBuild, runnableNativeDir } from './embedded-binaries.js';
import { newPassword, readPassword, settlePassword, withPasswordFile, writePassword } from './embedded-password.js';
import { initdb, LogTail, startPostgres, type RunningServer } from './embedded-server.js';
import { ensurePrivateDir, ensureSafeParents, type Owner } from './owned-paths.js';

export interface EmbeddedDatabase {
  url: string;
  /** The one asked for, or its /var/tmp fallback. */
  dataDir: string;
  stop(): Promise<void>;
}

/** As root (which PostgreSQL refuses), the `postgres` system user, created if missing; else null. */
export function postgresUser(): Owner | null {
  if (process.getuid?.() !== 0) return null;
  const existing = lookupUser('postgres');
  if (existing) return existing;
  const group = spawnSync('groupadd', ['--system', 'postgres'], { encoding: 'utf8' });
  const user = spawnSync('useradd', ['--system', '-g', 'postgres', 'postgres'], { encoding: 'utf8' });
  const created = lookupUser('postgres');
  if (!created) {
    const why = `${group.stderr ?? ''}${user.stderr ?? ''}`.trim() || String(user.error ?? group.error);
    throw new Error(`running as root needs a "postgres" user to run PostgreSQL as; creating it failed: ${why}`);
  }
  return created;
}

function lookupUser(name: string): Owner | null {
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** For a `dataDir` the postgres user cannot reach: a name predictable across starts. */
function fallbackDataDir(dataDir: string): string {
  const hash = createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 12);
  return path.join('/var/tmp', `kb-export-data-${hash}`);
}

function reachableDataDir(user: Owner | null, dataDir: string): string {
  if (!user || canExecute(user, path.dirname(dataDir))) return dataDir;
  const fallback = fallbackDataDir(dataDir);
  process.stderr.write(
    `kb-export: the postgres user cannot reach ${dataDir}; keeping the embedded database in ${fallback} instead\n`,
  );
  return fallback;
}

async function exists(p: string): Promise<boolean> {
  return fs.lstat(p).then(
    () => true,
    () => false,
  );
}

/** Throws UnsafePathError, an error coded MODULE_NOT_FOUND (none installed), or one with the server's log. */
export async function startEmbeddedPostgres(requestedDataDir: string): Promise<EmbeddedDatabase> {
  const build = installedNativeBuild();
  const serverUser = postgresUser();
  const owner: Owner = serverUser ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  const nativeDir = await runnableNativeDir(build, serverUser);
  const dataDir = reachableDataDir(serverUser, path.resolve(requestedDataDir));
  await ensureSafeParents(dataDir);
  await ensurePrivateDir(dataDir, owner);

  const log = new LogTail();
  const initialised = await exists(path.join(dataDir, 'PG_VERSION'));
  const stored = initialised ? await readPassword(dataDir, owner) : undefined;
  const password = stored ?? newPassword();
  // Written before the start, so a switch from the old fixed password resumes if interrupted.
  if (initialised && !stored) await writePassword(dataDir, password, owner);
  const port = await freePort();
  let server: RunningServer;
  try {
    if (!initialised) {
      await withPasswordFile(password, owner, (file) => initdb(nativeDir, dataDir, file, serverUser, log));
      await writePassword(dataDir, password, owner);
    }
    server = await startPostgres(nativeDir, dataDir, port, serverUser, log);
  } catch (err) {
    const hint = serverUser
      ? ` (running as root, the server runs as the "postgres" user, which must be able to reach ${dataDir})`
      : '';
    throw new Error(
      `embedded PostgreSQL did not start in ${dataDir}${hint}: ${(err as Error).message ?? err}\n${log.tail()}`,
    );
  }
  try {
    await settlePassword(port, password, dataDir);
  } catch (err) {
    await server.stop();
    throw err;
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    dataDir,
    stop: () => server.stop(),
  };
}
