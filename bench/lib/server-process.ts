/**
 * The server under test as a separate process (bench/server.ts), so its memory is its own: peak RSS
 * is read from `/proc/<pid>/status` (VmHWM, kB) and reset between measurements through
 * `/proc/<pid>/clear_refs` (Linux: writing `5` resets the peak to the current RSS).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { freePort } from '../../src/db/free-port.js';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cliRuntime } from './cli-runtime.js';
import { untracked } from './untracked.js';

export interface ServerProcess {
  /** `http://127.0.0.1:<port>` */
  base: string;
  /** The benchmarks' own listener in the same process (bench/server.ts): `/bench/ceiling/…`, `/bench/relay/…`. */
  benchBase: string;
  pid: number;
  /** Current RSS, bytes. */
  rss(): Promise<number>;
  /** Peak RSS since start or the last resetPeak(), bytes. */
  peakRss(): Promise<number>;
  /** Makes the peak the current RSS. */
  resetPeak(): Promise<void>;
  /** SIGTERM, then waits for the exit (a CPU profile is written on exit). */
  stop(): Promise<void>;
}

export interface ServerOptions {
  databaseUrl: string;
  /** Writes a `.cpuprofile` into this folder on exit (`node --cpu-prof`). */
  cpuProfDir?: string;
  /** Node.js flags beside the kb-export shebang's (src/cli/kb-export.ts), for experiments. */
  nodeFlags?: string[];
  /** Extra environment, e.g. EXPORT_BATCH_SIZE. */
  env?: Record<string, string>;
  /**
   * Under `tap`, whether the server collects V8 coverage (default true; false leaves out tap's
   * hooks altogether, see untracked.ts). A process collecting coverage keeps its counters and
   * scripts alive, about 10 MB more peak RSS that the shipped server does not have: tests that
   * assert the server's memory turn it off.
   */
  coverage?: boolean;
}

// This file runs compiled, from dist/bench/lib, for benchmarks and tests alike.
const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const SERVER_JS = path.join(DIST, 'bench', 'server.js');
const CLI_JS = path.join(DIST, 'src', 'cli', 'kb-export.js');

async function statusField(pid: number, field: string): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
  if (!m) throw new Error(`/proc/${pid}/status has no ${field}`);
  return Number(m[1]) * 1024;
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** The server gave up binding a port (EADDRINUSE): another process took it after freePort() chose it. */
class PortTaken extends Error {}

/**
 * Starts bench/server.ts on free ports and resolves once it answers HTTP. Throws if it exits first,
 * with the end of what it printed (the server logs to stdout, Node.js's own errors go to stderr).
 */
export async function startServer(opts: ServerOptions): Promise<ServerProcess> {
  // Tests run in parallel and each starts servers: a port freePort() saw free can be taken before
  // the child binds it, so that one failure gets fresh ports; any other failure is thrown at once.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(opts);
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt === 3) throw err;
    }
  }
}

async function startOnce(opts: ServerOptions): Promise<ServerProcess> {
  const port = await freePort();
  const benchPort = await freePort();
  const runtime = cliRuntime(CLI_JS);
  const args = [
    ...runtime.nodeFlags,
    ...(opts.nodeFlags ?? []),
    ...(opts.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProfDir}`] : []),
    SERVER_JS,
  ];
  // Without coverage, without tap's hooks at all: they cost the server CPU and memory.
  const [command, argv]: [string, string[]] =
    opts.coverage === false ? untracked([process.execPath, ...args]) : [process.execPath, args];
  const child = spawn(command, argv, {
    env: {
      ...process.env,
      ...runtime.env,
      DATABASE_URL: opts.databaseUrl,
      HOST: '127.0.0.1',
      PORT: String(port),
      BENCH_PORT: String(benchPort),
      // The load scenarios send far more than a client should; the limiter still runs on every request.
      RATE_LIMIT_MAX: '1000000000',
      // Every scenario drives the server with one key; scenario 9 sets its own limits.
      EXPORT_PER_USER_MAX: '1000',
      // Servers of other tests or benchmarks may share this Redis: their rate limits and leases stay apart.
      REDIS_KEY_PREFIX: `kbx-${randomBytes(4).toString('hex')}`,
      LOG_LEVEL: 'warn',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (d: Buffer) => {
    output = (output + d.toString()).slice(-4000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) {
      const message = `bench server exited with ${child.exitCode}: ${output}`;
      throw output.includes('EADDRINUSE') ? new PortTaken(message) : new Error(message);
    }
    try {
      await fetch(`${base}/health-probe`);
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`bench server did not answer within 60 s: ${output}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const pid = child.pid!;
  return {
    base,
    benchBase: `http://127.0.0.1:${benchPort}`,
    pid,
    rss: () => statusField(pid, 'VmRSS'),
    peakRss: () => statusField(pid, 'VmHWM'),
    resetPeak: () => writeFile(`/proc/${pid}/clear_refs`, '5'),
    async stop() {
      const done = exited(child);
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      await done;
      clearTimeout(timer);
    },
  };
}
