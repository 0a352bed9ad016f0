/**
 * What `npm test` (test/run.ts) promises its test processes: they run the compiled tests from
 * dist/test, without tap's TypeScript loader, from the first run of a fresh clone on (README,
 * Development), and with a DATABASE_URL. And how it splits the suite with `npm run test:soak`
 * (test/suites.ts): the soak list names test files that exist, and the two suites together run
 * every test file once.
 */
import path from 'node:path';
import t from 'tap';
import { ROOT } from './helpers/paths.js';
import { listTestFiles, parseSoakList, readSoakList, selectFiles } from './suites.js';

t.test('this test process runs compiled, without a TypeScript loader', async (t) => {
  t.match(new URL(import.meta.url).pathname, /\/dist\/test\/run\.test\.js$/);
  const loaders = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].filter((a) => a.includes('@tapjs/typescript'));
  t.same(loaders, [], 'no @tapjs/typescript in execArgv or NODE_OPTIONS');
});

t.test('DATABASE_URL is set, by the caller or to the embedded PostgreSQL npm test started', async (t) => {
  t.match(process.env.DATABASE_URL, /^postgres(ql)?:\/\//);
});

t.test('npm test and npm run test:soak split the suite: each test file runs in exactly one', async (t) => {
  const all = await listTestFiles(ROOT);
  const soak = readSoakList(ROOT);
  const fast = selectFiles('fast', all, soak, [])!;
  const soaked = selectFiles('soak', all, soak, [])!;
  t.ok(
    all.length > 50 && all.every((f) => f.startsWith('dist/test/') && f.endsWith('.test.js')),
    `tap lists the compiled tests (${all.length})`,
  );
  t.equal(soaked.length, soak.length, 'every soak list entry is a test file tap runs, once');
  t.ok(fast.length > soaked.length, `npm test runs most files (${fast.length}), test:soak the rest (${soaked.length})`);
  t.same([...fast, ...soaked].sort(), [...all].sort(), 'together, every file once');
  t.ok(fast.includes('dist/test/run.test.js'), 'this file is in npm test');
});

t.test('a path named on the command line runs as named, soak files included', async (t) => {
  const all = [
    'dist/test/a.test.js',
    'dist/test/faults/cut.test.js',
    'dist/test/faults/harness.test.js',
    'dist/test/x/y.test.js',
  ];
  const soak = parseSoakList('# faults\ntest/faults/cut.test.ts  # random cuts\n\ntest/x/y.test.ts\n');
  t.same(soak, ['test/faults/cut.test.ts', 'test/x/y.test.ts'], 'comments and blank lines are not entries');
  t.same(
    selectFiles('fast', all, soak, []),
    ['dist/test/a.test.js', 'dist/test/faults/harness.test.js'],
    'npm test: all but the soak set',
  );
  t.equal(
    selectFiles('fast', all, soak, ['dist/test/faults']),
    null,
    'npm test -- test/faults: tap runs the folder, its soak file too',
  );
  t.equal(selectFiles('fast', all, soak, ['dist/test/faults/cut.test.js']), null, 'npm test -- a soak file: that file');
  t.same(
    selectFiles('soak', all, soak, []),
    ['dist/test/faults/cut.test.js', 'dist/test/x/y.test.js'],
    'test:soak: the soak set',
  );
  t.same(
    selectFiles('soak', all, soak, [path.normalize('dist/test/faults/')]),
    ['dist/test/faults/cut.test.js'],
    'test:soak -- test/faults: its soak files',
  );
  t.same(selectFiles('soak', all, soak, ['dist/test/fault']), [], 'a folder is not a prefix of a name');
});

t.test('a soak list entry that is no test file stops both suites, rather than leaving a file out', async (t) => {
  const all = ['dist/test/a.test.js', 'dist/test/b.test.js'];
  for (const suite of ['fast', 'soak'] as const) {
    t.throws(
      () => selectFiles(suite, all, ['test/moved.test.ts'], []),
      /test\/soak\.txt names test\/moved\.test\.ts, which is not a test file/,
    );
    t.throws(() => selectFiles(suite, all, ['test/a.test.ts', 'test/a.test.ts'], []), /names test\/a\.test\.ts twice/);
  }
});
