/**
 * `npm test`: runs tap against a real PostgreSQL. With DATABASE_URL set, that server; otherwise a
 * throw-away embedded PostgreSQL started here and stopped afterwards. Exits with tap's exit code.
 * Tests run compiled: a file or folder named by its source (`test/export/rewrite`,
 * `test/app.test.ts`) runs from dist/test.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/db/embedded.js';

async function main(): Promise<number> {
  let embedded: EmbeddedDatabase | undefined;
  // Not created here: the embedded server creates it, owned by the user it runs as.
  const dataDir = path.join(os.tmpdir(), `kb-export-test-${randomBytes(4).toString('hex')}`);
  const env = { ...process.env };
  if (!env.DATABASE_URL) {
    process.stderr.write(`starting an embedded PostgreSQL for the tests in ${dataDir}\n`);
    embedded = await startEmbeddedPostgres(dataDir);
    env.DATABASE_URL = embedded.url;
  }
  try {
    const tap = path.resolve('node_modules/.bin/tap');
    const args = process.argv.slice(2).map(compiled);
    // More files than cores, as the suite waits on timers, sockets and child processes; not twice
    // as many, which brings the fault tests' /livez latencies close to their bounds.
    if (!args.some((a) => /^(-j|--jobs)/.test(a))) args.unshift(`--jobs=${Math.ceil(os.availableParallelism() * 1.5)}`);
    const child = spawn(tap, args, { stdio: 'inherit', env });
    const forward = (sig: NodeJS.Signals) => child.kill(sig);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    return await new Promise<number>((resolve) => {
      child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
    });
  } finally {
    if (embedded) {
      await embedded.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  }
}

/** `test/x/y.test.ts` or `test/x` as dist/test's compiled file or folder; other arguments as given. */
function compiled(arg: string): string {
  const source = path.normalize(arg);
  if (!/^test([/]|$)/.test(source) || !existsSync(source)) return arg;
  return path.join('dist', source.replace(/\.ts$/, '.js'));
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`npm test: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
