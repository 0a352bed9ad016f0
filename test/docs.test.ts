/**
 * docs/architecture.md and the README's "Where things live" name the files as they are: every
 * source file is on the architecture page, and every file either document names exists.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { ROOT } from './helpers/paths.js';

function sourceFiles(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
  );
}

/** File names in backticks: `src/x/y.ts`, `y.ts`, `sql/`. */
function namedFiles(text: string): string[] {
  return [...text.matchAll(/`([\w./-]+\.(?:ts|sql|md))`/g)].map((m) => m[1]!);
}

const SOURCES = sourceFiles('src');
const BASENAMES = new Set(SOURCES.map((f) => path.basename(f)));

/** A file of the repository named `name`, or the source file whose path ends with `name`. */
function exists(name: string): boolean {
  if (name.includes('/') && SOURCES.some((f) => f.endsWith(`/${name}`))) return true;
  if (name.includes('/')) {
    try {
      readFileSync(path.join(ROOT, name));
      return true;
    } catch {
      return false;
    }
  }
  return BASENAMES.has(name) || ['README.md'].includes(name);
}

t.test('docs/architecture.md names every source file, and only files that exist', async (t) => {
  const page = readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
  const named = namedFiles(page);
  for (const file of SOURCES) {
    const base = path.basename(file);
    t.ok(
      named.some((n) => n === file || n === base || file.endsWith(`/${n}`)),
      `${file} is on the page`,
    );
  }
  for (const name of named) t.ok(exists(name), `${name} exists`);
});

t.test('the README\'s "Where things live" names only files that exist', async (t) => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Where things live'));
  const body = section.slice(0, section.indexOf('\n## ', 5) > 0 ? section.indexOf('\n## ', 5) : undefined);
  const named = namedFiles(body);
  t.ok(named.length > 10, 'it names the files');
  for (const name of named) t.ok(exists(name), `${name} exists`);
});

t.test('the README and docs/ link only to files inside the repository, and those exist', async (t) => {
  const pages = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).map((f) => `docs/${f}`)];
  let links = 0;
  for (const page of pages) {
    const text = readFileSync(path.join(ROOT, page), 'utf8');
    t.notMatch(text, /\.\.\/shared\//, `${page} sends no reader to ../shared`);
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^(https?:|mailto:|#)/.test(target!)) continue;
      links++;
      const resolved = path.resolve(path.dirname(path.join(ROOT, page)), target!.split('#')[0]!);
      t.ok(resolved.startsWith(ROOT + path.sep), `${page}: ${target} stays inside the repository`);
      t.doesNotThrow(() => readFileSync(resolved), `${page}: ${target} exists`);
    }
  }
  t.ok(links >= 6, `the pages link to each other (${links} links)`);
});
