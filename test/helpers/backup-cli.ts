/**
 * `kb-export backup` (or another client command: `changes`) run as a child process of the built CLI (dist/src/cli/kb-export.js), for the backup
 * tests: its exit code, standard output (bytes) and standard error, and how long it took.
 */
import { execFile } from 'node:child_process';
import { untracked } from '../../bench/lib/untracked.js';
import { CLI } from './paths.js';

export interface BackupRun {
  code: number;
  stdout: Buffer;
  stderr: string;
  ms: number;
}

/** Runs `kb-export backup ARGS` with `env` over the test's environment (the key kbx_u1 by default). */
export function runBackupCli(
  args: string[],
  env: Record<string, string> = { KB_EXPORT_API_KEY: 'kbx_u1' },
): Promise<BackupRun> {
  return runCli(['backup', ...args], env);
}

/** Runs `kb-export ARGS` (the command first) with `env` over the test's environment. */
export function runCli(
  args: string[],
  env: Record<string, string> = { KB_EXPORT_API_KEY: 'kbx_u1' },
): Promise<BackupRun> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      ...untracked([process.execPath, CLI, ...args]),
      { env: { ...process.env, ...env }, encoding: 'buffer', maxBuffer: 1e9 },
      (err, stdout, stderr) =>
        resolve({
          code: err ? ((err as { code?: number }).code ?? 1) : 0,
          stdout,
          stderr: stderr.toString(),
          ms: Date.now() - started,
        }),
    );
  });
}
