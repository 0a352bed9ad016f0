/**
 * Which test files `npm test` and `npm run test:soak` run (README, Development). test/soak.txt
 * names the soak set, in one place: `npm test` runs every other file tap's configuration (.taprc)
 * includes, `npm run test:soak` only those. Paths named on the command line run as named, soak
 * files included.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

export type Suite = 'fast' | 'soak';

/** The soak list, relative to the repository's root. */
export const SOAK_LIST = 'test/soak.txt';

/** The list's entries as written: one source path a line, without comments and blank lines. */
export function parseSoakList(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.replace(/#.*/, '').trim())
    .filter((line) => line !== '');
}

export function readSoakList(root: string): string[] {
  return parseSoakList(readFileSync(path.join(root, SOAK_LIST), 'utf8'));
}

/** `test/x/y.test.ts` or `test/x` as the compiled file or folder tap runs: `dist/test/…`. */
export function compiledPath(source: string): string {
  return path.join('dist', path.normalize(source).replace(/\.ts$/, '.js'));
}

/**
 * The test files tap would run with no path named: .taprc's include and exclude, as tap itself
 * reads them (`tap list`), relative to `root`, compiled (dist/test/…).
 */
export async function listTestFiles(root: string): Promise<string[]> {
  const tap = path.join(root, 'node_modules/.bin/tap');
  const child = spawn(tap, ['list'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
  const code = await new Promise<number | null>((resolve, reject) => child.on('error', reject).on('exit', resolve));
  if (code !== 0) throw new Error(`tap list exited with ${code}`);
  return out.split('\n').filter((f) => f !== '');
}

/**
 * The files tap is to run for `suite`, from `all` (listTestFiles) and the soak list's `soak`
 * entries; `named` are the paths given on the command line, compiled. Null when `npm test` was
 * given paths: tap runs exactly those (a folder with its soak files). For the soak suite, named
 * paths narrow it to the soak files inside them. A soak entry that is not one of `all` is an error
 * rather than a file that silently leaves both suites (or an entry that silently names nothing).
 */
export function selectFiles(
  suite: Suite,
  all: readonly string[],
  soak: readonly string[],
  named: readonly string[],
): string[] | null {
  const known = new Set(all);
  const soakFiles = new Set<string>();
  for (const entry of soak) {
    const file = compiledPath(entry);
    if (!known.has(file)) throw new Error(`${SOAK_LIST} names ${entry}, which is not a test file tap runs (${file})`);
    if (soakFiles.has(file)) throw new Error(`${SOAK_LIST} names ${entry} twice`);
    soakFiles.add(file);
  }
  if (suite === 'fast') return named.length > 0 ? null : all.filter((f) => !soakFiles.has(f));
  const inside = (file: string) => named.some((n) => file === path.normalize(n) || file.startsWith(path.join(n, '/')));
  return all.filter((f) => soakFiles.has(f) && (named.length === 0 || inside(f)));
}
