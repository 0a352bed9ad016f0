/**
 * What `npm test` (test/run.ts) promises its test processes: they run the compiled tests from
 * dist/test, without tap's TypeScript loader, from the first run of a fresh clone on (README,
 * Development), and with a DATABASE_URL.
 */
import t from 'tap';

t.test('this test process runs compiled, without a TypeScript loader', async (t) => {
  t.match(new URL(import.meta.url).pathname, /\/dist\/test\/run\.test\.js$/);
  const loaders = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].filter((a) => a.includes('@tapjs/typescript'));
  t.same(loaders, [], 'no @tapjs/typescript in execArgv or NODE_OPTIONS');
});

t.test('DATABASE_URL is set, by the caller or to the embedded PostgreSQL npm test started', async (t) => {
  t.match(process.env.DATABASE_URL, /^postgres(ql)?:\/\//);
});
