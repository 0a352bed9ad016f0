/**
 * `npm test` and `npm run test:soak` (`npm test -- --soak`): run tap against a real PostgreSQL.
 * With DATABASE_URL set, that server; otherwise a throw-away embedded PostgreSQL started here and
 * stopped afterwards. Exits with tap's exit code. Tests run compiled: a file or folder named by its
 * source (`test/export/rewrite`, `test/app.test.ts`) runs from dist/test. With no path named,
 * `npm test` runs every test file but the soak set (test/soak.txt), and `--soak` only that set,
 * without coverage (test/suites.ts); a path named runs as named.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/db/embedded.js';
import { listTestFiles, readSoakList, selectFiles } from './suites.js';

async function main(): Promise<number> {
  const suite = process.argv.includes('--soak') ? 'soak' : 'fast';
  // Out of process.argv too: tap's configuration (buildTapForPlugins) reads it, and knows no --soak.
  process.argv = process.argv.filter((a) => a !== '--soak');
  const args = process.argv.slice(2).map(compiled);
  // Before the database starts: a soak list that names a file tap does not run fails at once.
  const named = args.filter((a) => !a.startsWith('-') && existsSync(a));
  const files = selectFiles(suite, await listTestFiles(process.cwd()), readSoakList(process.cwd()), named);
  if (files?.length === 0) throw new Error(`no soak test file in ${named.join(', ')}`);
  if (files) args.splice(0, args.length, ...args.filter((a) => !named.includes(a)), ...files);
  // The soak set alone covers a fraction of the code: .taprc's thresholds are npm test's.
  if (suite === 'soak') args.unshift('--disable-coverage');
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
    await buildTapForPlugins(tap);
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

/**
 * Rebuilds tap's Test class when it was not built for `.taprc`'s plugins (as after `npm ci`).
 * tap rebuilds it by itself, but that run's test processes still get the old build's `--import`
 * loaders (tap 21): on a fresh clone, the TypeScript loader that `.taprc` turns off.
 */
async function buildTapForPlugins(tap: string): Promise<void> {
  // In the order tap loads them: @tapjs/core and @tapjs/test import each other, and with
  // @tapjs/test first, Node 24 reaches a class of it before it is initialised.
  await import('@tapjs/core');
  const { signature } = await import('@tapjs/test');
  const { TapConfig } = await import('@tapjs/config');
  if ((await TapConfig.load()).pluginSignature === signature) return;
  process.stderr.write('building tap for the plugins in .taprc\n');
  const code = await new Promise<number | null>((resolve) => {
    spawn(tap, ['build'], { stdio: ['ignore', 'ignore', 'inherit'] }).on('exit', resolve);
  });
  if (code !== 0) throw new Error(`tap build exited with ${code}`);
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
