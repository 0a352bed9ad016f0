/**
 * A `kb-export` command run as the shipped executable (dist/src/cli/kb-export.js, through its shebang), with
 * its peak RSS read by this process from `/proc/<pid>/status` (VmHWM) at the last moment: a module
 * loaded into the command with NODE_OPTIONS holds it in its `exit` handler until the reading is
 * taken. Linux only.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { untracked } from './untracked.js';

/** The marker the held process writes on stderr; then it waits for a byte on stdin. */
const HELD = 'kb-export-held-at-exit';

/**
 * Loaded with `--import`: at exit, says so on stderr and waits (in 1 ms sleeps, stdin may be
 * non-blocking) for one byte on stdin or its end.
 */
const HOLD_AT_EXIT = `
import { readSync, writeSync } from 'node:fs';
process.on('exit', () => {
  writeSync(2, '\\n${HELD}\\n');
  const byte = Buffer.alloc(1);
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      readSync(0, byte, 0, 1, null);
      return;
    } catch (err) {
      if (err.code !== 'EAGAIN') return;
      Atomics.wait(nap, 0, 0, 1);
    }
  }
});
`;

export interface CliRun {
  code: number | null;
  stdout: string;
  /** stderr without the hold marker, its last 8 KB. */
  stderr: string;
  /** VmHWM, bytes: the command's peak RSS over its whole run. */
  peakRss: number;
  seconds: number;
}

/** The built executable, dist/src/cli/kb-export.js, beside this file's dist/bench/lib. */
export function cliPath(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/cli/kb-export.js');
}

/**
 * Runs `kb-export ARGS` with `env` added to this process's (NODE_OPTIONS replaced: no test
 * runner's hooks or coverage in the measured process) and returns what it printed, its exit code,
 * its peak RSS and its wall time. `cli`: another build's executable (a baseline's).
 */
export async function runCli(args: string[], env: Record<string, string>, cli = cliPath()): Promise<CliRun> {
  const started = performance.now();
  const [command, argv] = untracked(
    [cli, ...args],
    `--import=data:text/javascript,${encodeURIComponent(HOLD_AT_EXIT)}`,
  );
  const child = spawn(command, argv, {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let peakRss = 0;
  let ended = 0;
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8192);
    if (!stderr.includes(HELD)) return;
    stderr = stderr.replace(`\n${HELD}\n`, '');
    void readFile(`/proc/${child.pid}/status`, 'utf8').then(
      (status) => {
        peakRss = Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
        ended = performance.now();
        child.stdin.end('x');
      },
      () => child.stdin.end('x'),
    );
  });
  child.stdin.on('error', () => {});
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr, peakRss, seconds: ((ended || performance.now()) - started) / 1000 };
}
