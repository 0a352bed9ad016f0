/**
 * A real PostgreSQL primary and hot standby for one test file, from the embedded binaries (so it
 * runs on a machine with nothing but Node.js), on free loopback ports, in a temporary folder
 * removed at teardown. Those binaries have no pg_basebackup: the standby is a copy of the primary's
 * data folder as initdb left it (cleanly shut down) with standby.signal and primary_conninfo, so
 * both share one system identifier and the standby streams everything from the first checkpoint.
 * wal_keep_size keeps enough WAL for a standby stopped during a test to catch up. A pair asked for
 * `messagesLocale` also accepts lc_messages in a locale other than C (ReplicaPair.messagesLocale).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { installedNativeBuild, runnableNativeDir } from '../../src/db/embedded-binaries.js';
import { newPassword, withPasswordFile } from '../../src/db/embedded-password.js';
import { initdb, LogTail, startPostgres, type RunningServer } from '../../src/db/embedded-server.js';
import { postgresUser } from '../../src/db/embedded.js';
import { freePort } from '../../src/db/free-port.js';
import { ensurePrivateDir, type Owner } from '../../src/db/owned-paths.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** Settings both servers start with: fast and small, replication on. */
const COMMON_SETTINGS = {
  wal_level: 'replica',
  wal_keep_size: '256MB',
  hot_standby: 'on',
  wal_receiver_status_interval: '1s',
  // Throw-away servers: a crash loses nothing the tests need.
  fsync: 'off',
  full_page_writes: 'off',
  shared_buffers: '32MB',
  log_min_messages: 'warning',
};

export class PgNode {
  #server: RunningServer | null = null;
  readonly log = new LogTail();

  constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly port: number,
    readonly url: string,
    private readonly nativeDir: string,
    private readonly user: Owner | null,
    private readonly env: Record<string, string> = {},
  ) {}

  get running(): boolean {
    return this.#server !== null;
  }

  async start(): Promise<void> {
    if (this.#server) return;
    try {
      this.#server = await startPostgres(this.nativeDir, this.dataDir, this.port, this.user, this.log, this.env);
    } catch (err) {
      throw new Error(`${this.name} did not start: ${(err as Error).message}\n${this.log.tail(20)}`);
    }
  }

  /** Fast shutdown (a clean one: the standby can follow again after a restart). */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    await server?.stop();
  }

  /** Runs `fn` on a short-lived connection of its own. */
  async query<T>(fn: (sql: postgres.Sql) => Promise<T>): Promise<T> {
    const sql = postgres(this.url, { max: 1, onnotice: () => {}, connect_timeout: 5 });
    try {
      return await fn(sql);
    } finally {
      await sql.end({ timeout: 1 });
    }
  }

  /** ALTER SYSTEM for each setting, then a reload (no restart: only reloadable settings). */
  async configure(settings: Record<string, string | number | boolean>): Promise<void> {
    await this.query(async (sql) => {
      for (const [name, value] of Object.entries(settings)) {
        await sql.unsafe(`ALTER SYSTEM SET ${name} = '${String(value)}'`);
      }
      await sql`SELECT pg_reload_conf()`;
    });
  }
}

export interface ReplicaPair {
  primary: PgNode;
  standby: PgNode;
  /** The superuser's password on both (user `postgres`). */
  password: string;
  /**
   * With `messagesLocale`: a locale other than C that both servers take for lc_messages (German,
   * compiled for them; else one the system has; else C.UTF-8). 'C' without it.
   */
  messagesLocale: string;
  /** Holds back replay on the standby: it keeps receiving WAL but applies none. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Resolves once the standby has replayed everything the primary has flushed now. */
  waitForReplay(timeoutMs?: number): Promise<void>;
  /** Makes the standby a primary (pg_promote, waiting until it is done). */
  promote(): Promise<void>;
}

function conf(settings: Record<string, string | number | boolean>): string {
  return Object.entries(settings)
    .map(([k, v]) => `${k} = '${String(v)}'\n`)
    .join('');
}

interface PairOptions {
  /** Settings both servers' configuration gets before they start. */
  settings?: Record<string, string | number | boolean>;
  /** Settings the standby's configuration gets before it starts. */
  standbySettings?: Record<string, string | number | boolean>;
  /** Have a locale other than C for lc_messages (ReplicaPair.messagesLocale). */
  messagesLocale?: boolean;
}

/** Starts a primary and a hot standby streaming from it; both stopped and their folder removed at `t`'s teardown. */
export async function startReplicaPair(t: Teardown, opts: PairOptions = {}): Promise<ReplicaPair> {
  const serverUser = postgresUser();
  const owner: Owner = serverUser ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  const nativeDir = await runnableNativeDir(installedNativeBuild(), serverUser);
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'kb-export-replica-'));
  const nodes: PgNode[] = [];
  const cleanUp = async () => {
    for (const n of nodes.reverse()) await n.stop();
    await fs.rm(root, { recursive: true, force: true });
  };
  t.teardown(cleanUp);
  try {
    return await makePair(root, nativeDir, serverUser, owner, nodes, opts);
  } catch (err) {
    // A failed start-up may end the test file before its teardown runs.
    await cleanUp();
    throw err;
  }
}

async function makePair(
  root: string,
  nativeDir: string,
  serverUser: Owner | null,
  owner: Owner,
  nodes: PgNode[],
  opts: PairOptions,
): Promise<ReplicaPair> {
  // The server user must reach the data folders inside.
  if (serverUser) await fs.chown(root, serverUser.uid, serverUser.gid);
  const locale = opts.messagesLocale ? await localeForMessages(path.join(root, 'locales')) : { name: 'C', env: {} };

  const password = newPassword();
  const primaryDir = path.join(root, 'primary');
  const standbyDir = path.join(root, 'standby');
  await ensurePrivateDir(primaryDir, owner);
  const initLog = new LogTail();
  await withPasswordFile(password, owner, (file) => initdb(nativeDir, primaryDir, file, serverUser, initLog));
  await fs.appendFile(path.join(primaryDir, 'postgresql.conf'), conf({ ...COMMON_SETTINGS, ...opts.settings }));

  // initdb leaves the folder cleanly shut down: a copy of it is a valid base backup.
  const cp = spawnSync('cp', ['-a', primaryDir, standbyDir], { ...(serverUser ?? {}), encoding: 'utf8' });
  if (cp.status !== 0) throw new Error(`copying the primary's data folder failed: ${cp.stderr}`);
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const primaryInfo = `host=127.0.0.1 port=${primaryPort} user=postgres password=${password} application_name=standby0`;
  await writeOwned(path.join(standbyDir, 'standby.signal'), '', owner);
  await fs.appendFile(
    path.join(standbyDir, 'postgresql.conf'),
    conf({ primary_conninfo: primaryInfo, ...opts.standbySettings }),
  );

  const url = (port: number) => `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  const primary = new PgNode('primary', primaryDir, primaryPort, url(primaryPort), nativeDir, serverUser, locale.env);
  const standby = new PgNode('standby', standbyDir, standbyPort, url(standbyPort), nativeDir, serverUser, locale.env);
  nodes.push(primary);
  await primary.start();
  nodes.push(standby);
  await standby.start();

  const pair: ReplicaPair = {
    primary,
    standby,
    password,
    messagesLocale: locale.name,
    pauseReplay: () => standby.query((sql) => sql`SELECT pg_wal_replay_pause()`).then(() => {}),
    resumeReplay: () => standby.query((sql) => sql`SELECT pg_wal_replay_resume()`).then(() => {}),
    async waitForReplay(timeoutMs = 10_000) {
      const [row] = await primary.query(
        (sql) => sql<{ lsn: string }[]>`SELECT pg_current_wal_flush_lsn()::text AS lsn`,
      );
      const lsn = row!.lsn;
      const deadline = Date.now() + timeoutMs;
      await standby.query(async (sql) => {
        for (;;) {
          const [row] = await sql<
            { behind: boolean }[]
          >`SELECT coalesce(pg_last_wal_replay_lsn() < ${lsn}::pg_lsn, true) AS behind`;
          if (!row!.behind) return;
          if (Date.now() > deadline) throw new Error(`the standby did not replay up to ${lsn} within ${timeoutMs} ms`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      });
    },
    promote: () => standby.query((sql) => sql`SELECT pg_promote(true, 30)`).then(() => {}),
  };
  await waitForStreaming(primary);
  return pair;
}

/**
 * A locale other than C for lc_messages, and the servers' environment to find it. German is
 * compiled with localedef into `dir` (no root, nothing installed: the servers find it through
 * LOCPATH); where localedef or its sources are missing, a locale `locale -a` lists, else C.UTF-8.
 */
async function localeForMessages(dir: string): Promise<{ name: string; env: Record<string, string> }> {
  const name = 'de_DE.UTF-8';
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  // Exit status 1: compiled, with warnings.
  const made = spawnSync('localedef', ['-i', 'de_DE', '-f', 'UTF-8', path.join(dir, name)], { encoding: 'utf8' });
  if (
    (made.status === 0 || made.status === 1) &&
    (await fs.stat(path.join(dir, name, 'LC_MESSAGES')).catch(() => null))
  ) {
    return { name, env: { LOCPATH: dir } };
  }
  const listed = spawnSync('locale', ['-a'], { encoding: 'utf8' }).stdout ?? '';
  const other = listed.split('\n').find((l) => l !== '' && !/^(C|POSIX)([._].*)?$/i.test(l));
  return { name: other ?? 'C.UTF-8', env: {} };
}

async function writeOwned(file: string, text: string, owner: Owner): Promise<void> {
  await fs.writeFile(file, text, { mode: 0o600 });
  if (owner.uid !== process.getuid?.()) await fs.chown(file, owner.uid, owner.gid);
}

/** Waits until the primary has a walsender streaming to the standby. */
async function waitForStreaming(primary: PgNode, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await primary.query(async (sql) => {
    for (;;) {
      const rows = await sql`SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'`;
      if (rows.length > 0) return;
      if (Date.now() > deadline) throw new Error(`the standby did not start streaming within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });
}
