import path from 'node:path';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ERRORS } from '../src/errors.js';
import { ROOT } from './helpers/paths.js';

t.test("README's error table and src/errors.ts list the same codes with the same statuses", async (t) => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Errors'), readme.indexOf('## Configuration'));
  const rows = [...section.matchAll(/^\| (\d{3}) \| `([A-Z_]+)` \|/gm)].map((m) => [m[2], Number(m[1])]);
  t.ok(rows.length > 0, 'the README has an error table');
  const table = Object.entries(ERRORS).map(([code, e]) => [code, e.status]);
  t.same(Object.fromEntries(rows), Object.fromEntries(table));
  t.equal(rows.length, table.length, 'no code is listed twice');
});

t.test('export-api.md section 7: the codes of the contract have their statuses', async (t) => {
  t.equal(ERRORS.INVALID_API_KEY.status, 401);
  t.equal(ERRORS.BOOK_NOT_FOUND.status, 404);
  t.equal(ERRORS.RATE_LIMITED.status, 429);
  t.equal(ERRORS.EXPORT_FAILED.status, 500);
  t.equal(ERRORS.BOOK_NOT_FOUND.message, 'Knowledge base not found', 'export-api.md 7 rule 2');
});
