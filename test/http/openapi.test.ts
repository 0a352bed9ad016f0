/**
 * `/openapi.json` over a real socket (decisions.md D10.4): an OpenAPI 3.1 document that a real
 * validator accepts, which lists every route the app serves and every status and error code of
 * the README's error table, with Retry-After where the README promises it.
 */
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import t from 'tap';
import { ROUTES } from '../../src/http/routes.js';
import { call } from '../helpers/http.js';
import { startServer } from '../helpers/app.js';
import { ROOT } from '../helpers/paths.js';

interface Operation {
  responses: Record<string, { headers?: Record<string, unknown>; content?: Record<string, { schema: unknown }> }>;
}

t.test('/openapi.json: valid OpenAPI 3.1, every route, every status and code of the README', async (t) => {
  const server = await startServer(t, { RATE_LIMIT_MAX: '1' });
  const res = await call(server.url, '/openapi.json', { auth: null });
  t.equal(res.status, 200, 'no key needed');
  t.equal((await call(server.url, '/openapi.json', { auth: null })).status, 200, 'not rate limited (RATE_LIMIT_MAX=1)');
  const doc = res.json as { openapi: string; paths: Record<string, Record<string, Operation>> };
  t.equal(doc.openapi, '3.1.0');

  const validator = new Validator();
  const verdict = await validator.validate(doc);
  t.ok(verdict.valid, `the validator accepts it: ${JSON.stringify(verdict.errors ?? null).slice(0, 500)}`);
  t.equal(validator.version, '3.1', 'validated as 3.1');

  const listed = Object.keys(doc.paths);
  for (const route of ROUTES) {
    const path = route.path.replace(/:(\w+)/g, '{$1}');
    t.ok(listed.includes(path), `${path} is documented`);
    for (const method of route.allow.split(', '))
      t.ok(doc.paths[path]?.[method.toLowerCase()], `${method} ${path} is documented`);
  }
  t.ok(listed.includes('/metrics'), '/metrics is documented');
  for (const path of listed) {
    const served = await call(server.url, path.replace('{bookSlug}', 'kb'), { auth: null });
    t.not(served.json?.code, 'NOT_FOUND', `${path} is a route the app serves`);
  }

  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Errors'), readme.indexOf('### Limits'));
  const rows = [...section.matchAll(/^\| (\d{3}) \| `([A-Z_]+)` \| (.*) \|$/gm)].map((m) => ({
    status: m[1]!,
    code: m[2]!,
    when: m[3]!,
  }));
  t.ok(rows.length >= 10, 'the README error table');
  const get = doc.paths['/api/v1/open/books/{bookSlug}/docs']!.get!;
  for (const { status, code, when } of rows) {
    const response = get.responses[status];
    t.ok(response, `${status} is documented`);
    t.match(JSON.stringify(response?.content), code, `${code} is documented under ${status}`);
    if (/Retry-After/.test(when)) t.ok(response?.headers?.['Retry-After'], `${status} documents Retry-After`);
  }
  t.ok(get.responses['200']?.content?.['application/x-ndjson'], 'NDJSON is documented');
  t.ok(get.responses['304'], '304 is documented');
});
