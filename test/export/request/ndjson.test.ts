/**
 * NDJSON over a real socket (decisions.md D9.4): chosen by Accept (q-values and order honoured),
 * the same documents in the same order as the JSON body, every line parses, the meta line last;
 * its own ETag and cache entry; an export cut mid-body (the database link cut through a proxy)
 * has no meta line and ends in an error.
 */
import t from 'tap';
import { drainBody } from '../../helpers/http.js';
import { request } from 'undici';
import { seedGeneratedBooks } from '../../helpers/generated-kb.js';
import { createTestDatabase } from '../../helpers/db.js';
import { startServer } from '../../helpers/app.js';
import { startProxiedServer } from '../../helpers/proxied-app.js';

const PATH = '/api/v1/open/books/kb/docs?excludeCategories=false';
const AUTH = { authorization: 'Bearer kbx_u1' };
const NDJSON = 'application/x-ndjson';

async function get(base: string, accept?: string, extra: Record<string, string> = {}) {
  const res = await request(`${base}${PATH}`, { headers: { ...AUTH, ...(accept ? { accept } : {}), ...extra } });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body, text: body.toString('utf8') };
}

const db = await createTestDatabase(t);
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 120, paragraphs: 1 }]);

t.test('the NDJSON body: book line, one document per line in the JSON body order, meta line last', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0', EXPORT_BATCH_SIZE: '16' }, db);
  const json = await get(server.url);
  const nd = await get(server.url, NDJSON);
  t.equal(nd.status, 200);
  t.equal(nd.headers['content-type'], NDJSON);
  t.match(nd.headers.vary, /Accept/);
  t.ok(nd.text.endsWith('\n'), 'every line ends with a newline, the last too');
  const lines = nd.text
    .slice(0, -1)
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const whole = JSON.parse(json.text) as { book: unknown; documents: unknown[]; meta: { count: number } };
  t.same(lines[0], { success: true, book: whole.book }, 'first line: success and the book');
  t.same(lines.slice(1, -1), whole.documents, 'then the same documents, in the same order');
  t.same(lines.at(-1), { meta: { count: whole.meta.count } }, 'last line: the count');
  t.equal(lines.length - 2, whole.meta.count);
  t.ok(whole.meta.count > 100);
});

t.test('Accept: NDJSON only when preferred to JSON, by q-value or order', async (t) => {
  const server = await startServer(t, {}, db);
  const cases: [string | undefined, string][] = [
    [undefined, 'application/json'],
    ['*/*', 'application/json'],
    ['text/html', 'application/json'],
    [NDJSON, NDJSON],
    [`application/json, ${NDJSON}`, 'application/json'],
    [`${NDJSON}, application/json`, NDJSON],
    [`application/json;q=0.5, ${NDJSON}`, NDJSON],
    [`${NDJSON};q=0.4, application/json;q=0.8`, 'application/json'],
    [`${NDJSON};q=0`, 'application/json'],
  ];
  for (const [accept, want] of cases) {
    const res = await get(server.url, accept);
    t.match(res.headers['content-type'], new RegExp(`^${want.replace('/', '\\/')}`), `Accept: ${accept ?? '(none)'}`);
  }
});

t.test('NDJSON has its own ETag and cache entry; If-None-Match works on it', async (t) => {
  const server = await startServer(t, {}, db);
  const nd1 = await get(server.url, NDJSON);
  const nd2 = await get(server.url, NDJSON);
  const json = await get(server.url);
  t.ok(nd1.headers.etag);
  t.not(nd1.headers.etag, json.headers.etag, 'JSON and NDJSON bodies have different ETags');
  t.ok(nd1.body.equals(nd2.body), 'the second NDJSON export (from the cache) is byte-identical');
  t.ok((await server.cacheHits()) >= 1, 'served from the cache');
  t.equal(
    json.headers['content-type'],
    'application/json; charset=utf-8',
    'and the cache did not hand NDJSON to a JSON request',
  );
  const again = await get(server.url, NDJSON, { 'if-none-match': String(nd1.headers.etag) });
  t.equal(again.status, 304);
  const crossed = await get(server.url, undefined, { 'if-none-match': String(nd1.headers.etag) });
  t.equal(crossed.status, 200, 'the NDJSON ETag does not match the JSON body');
});

t.test('an NDJSON export cut mid-body has no meta line and ends in an error', async (t) => {
  const server = await startProxiedServer(t, db, {
    EXPORT_CACHE_BYTES: '0',
    EXPORT_BATCH_SIZE: '8',
    DB_TIMEOUT_MS: '2000',
  });
  server.exportProxy.cutAfter(60_000);
  const res = await request(`${server.url}${PATH}`, { headers: { ...AUTH, accept: NDJSON } });
  t.equal(res.statusCode, 200, 'the first batch went out before the cut');
  const { bytes, error } = await drainBody(res.body);
  t.ok(error, 'the body ends in an error, not a clean end');
  const lines = bytes
    .toString('utf8')
    .split('\n')
    .filter((l) => l !== '');
  t.ok(lines.length > 1, `${lines.length} lines arrived`);
  t.notOk(
    lines.some((l) => l.startsWith('{"meta":')),
    'no meta line',
  );
});
