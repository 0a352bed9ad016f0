/**
 * Where things are for a test. Tests run compiled, from dist/test (npm test's one `tsc` pass emits
 * them beside dist/src), so `import.meta.url` points into dist/; files tsc does not emit (JSON and
 * HTML fixtures, .mjs hooks) stay in test/ and are found through `sourceUrl`.
 */
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The repository's root (this file is dist/test/helpers/paths.js). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The built executable, dist/src/cli/kb-export.js. */
export const CLI = path.join(ROOT, 'dist/src/cli/kb-export.js');

/**
 * `relative` resolved against the source of the module at `moduleUrl` (`import.meta.url`):
 * `sourceUrl(import.meta.url, './fixtures/x.json')` in dist/test/load/a.test.js is
 * test/load/fixtures/x.json.
 */
export function sourceUrl(moduleUrl: string, relative: string): URL {
  const inDist = path.relative(path.join(ROOT, 'dist'), fileURLToPath(moduleUrl));
  return new URL(relative, pathToFileURL(path.join(ROOT, inDist)));
}
