/** initdb and postgres, with C messages: readiness is read from the log. TCP only (docs/architecture.md). */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { Owner } from './owned-paths.js';

const ENV = { LC_MESSAGES: 'C' };

/** The last lines the server and initdb printed, for error messages. */
export class LogTail {
  private readonly lines: string[] = [];

  push(chunk: unknown): void {
    this.lines.push(...String(chunk).split('\n').filter(Boolean));
    if (this.lines.length > 40) this.lines.splice(0, this.lines.length - 40);
  }

  tail(n = 8): string {
    return this.lines.slice(-n).join('\n');
  }
}

function run(
  bin: string,
  args: string[],
  user: Owner | null,
  log: LogTail,
  env: Record<string, string> = {},
): ChildProcess {
  const child = spawn(bin, args, { ...(user ?? {}), env: { ...env, ...ENV }, stdio: ['ignore', 'pipe', 'pipe'] });
  // Read both pipes for the server's whole life: a full pipe would block its logging.
  child.stdout!.on('data', (c) => log.push(c));
  child.stderr!.on('data', (c) => log.push(c));
  return child;
}

/** `dataDir` missing or empty; the password is `pwfile`'s first line. Throws when initdb fails. */
export async function initdb(
  nativeDir: string,
  dataDir: string,
  pwfile: string,
  user: Owner | null,
  log: LogTail,
): Promise<void> {
  const args = [
    `--pgdata=${dataDir}`,
    '--auth=scram-sha-256',
    '--username=postgres',
    `--pwfile=${pwfile}`,
    '--encoding=UTF8',
    '--locale=C',
    '--lc-messages=C',
  ];
  const child = run(path.join(nativeDir, 'bin', 'initdb'), args, user, log);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (c) => resolve(c));
  });
  if (code !== 0) throw new Error(`initdb exited with code ${code}`);
}

export interface RunningServer {
  pid: number;
  /** Fast shutdown (SIGINT); resolves when the server has exited. */
  stop(): Promise<void>;
}

/**
 * Resolves once it accepts connections; throws if it exits first. SIGINT'd if we exit without stop().
 * `env` is added to the server's environment (the tests' standbys get a LOCPATH there, to find a
 * locale they compiled); its log stays in C.
 */
export async function startPostgres(
  nativeDir: string,
  dataDir: string,
  port: number,
  user: Owner | null,
  log: LogTail,
  env: Record<string, string> = {},
): Promise<RunningServer> {
  const args = ['-D', dataDir, '-p', String(port)];
  args.push('-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'lc_messages=C');
  const child = run(path.join(nativeDir, 'bin', 'postgres'), args, user, log, env);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) =>
      reject(new Error(`postgres exited (${signal ?? `code ${code}`}) before accepting connections`)),
    );
    let recent = '';
    child.stderr!.on('data', (c) => {
      // The line may arrive split across chunks.
      recent = (recent + String(c)).slice(-4096);
      // A hot standby says "ready to accept read-only connections".
      if (/database system is ready to accept (read-only )?connections/.test(recent)) resolve();
    });
  });
  const killOnExit = () => {
    try {
      child.kill('SIGINT');
    } catch {
      // already gone
    }
  };
  process.on('exit', killOnExit);
  return {
    pid: child.pid!,
    async stop() {
      process.removeListener('exit', killOnExit);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await exited;
    },
  };
}
