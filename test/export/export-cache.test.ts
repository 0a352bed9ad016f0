/**
 * The cache of small export bodies (src/export/export-cache.ts, sql/0002_export_version.sql): a
 * body is served again only while nothing it holds has changed, so every change below must be
 * seen by the very next export, and a served body is byte-for-byte the streamed one.
 */
import t from 'tap';
import { request } from 'undici';
import { ExportCache, type ExportCacheKey } from '../../src/export/export-cache.js';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';

const AUTH = { authorization: 'Bearer kbx_u1' };
const key = (version: string, extra: Partial<ExportCacheKey> = {}): ExportCacheKey => ({
  bookId: 'b',
  version,
  excludeCategories: true,
  includeContentHtml: true,
  ...extra,
});

t.test('ExportCache: hits, misses, size limits and least-recently-used eviction', async (t) => {
  const c = new ExportCache(400);
  t.equal(c.maxEntryBytes, 100);
  t.equal(c.get(key('1')), undefined);
  c.set(key('1'), Buffer.alloc(101));
  t.equal(c.get(key('1')), undefined, 'a body above a quarter of the budget is not kept');
  c.set(key('1'), Buffer.from('one'));
  t.same(c.get(key('1')), Buffer.from('one'));
  t.equal(c.get(key('1', { includeContentHtml: false })), undefined, 'options are part of the key');
  t.equal(c.hits, 1);
  t.equal(c.misses, 3);
  for (const id of ['a', 'e', 'c', 'd', 'f']) c.set({ ...key('1'), bookId: id }, Buffer.alloc(100));
  t.ok(c.size <= 400, `stays within the budget (${c.size})`);
  t.equal(c.get({ ...key('1'), bookId: 'a' }), undefined, 'the least recently used went first');
  t.ok(c.get({ ...key('1'), bookId: 'f' }), 'the newest stayed');
});

t.test('ExportCache: a newer version drops the older ones; an older one is never stored over it', async (t) => {
  const c = new ExportCache(1000);
  c.set(key('9'), Buffer.from('v9'));
  c.set(key('10'), Buffer.from('v10'));
  t.equal(c.get(key('9')), undefined, 'version 9 went when 10 arrived (compared as numbers)');
  c.set(key('9'), Buffer.from('stale'));
  t.equal(c.get(key('9')), undefined, 'a body read at an older version is not kept');
  t.same(c.get(key('10')), Buffer.from('v10'));
  t.equal(c.size, 3);
});

t.test('ExportCache: 0 bytes turns it off', async (t) => {
  const c = new ExportCache(0);
  c.set(key('1'), Buffer.from('x'));
  t.equal(c.get(key('1')), undefined);
  t.equal(c.size, 0);
});

async function exportBody(server: TestServer, query = ''): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  const res = await request(`${server.url}/api/v1/open/books/kb/docs${query}`, { headers: AUTH });
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) };
}

const names = (body: Buffer) => (JSON.parse(body.toString()) as { documents: { name: string }[] }).documents.map((d) => d.name);

t.test('a repeated export is served from memory with the same bytes and headers', async (t) => {
  const server = await startServer(t);
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0', { contentHtml: '<img src="x.png">' }), doc('d2', 'a1')]));
  const first = await exportBody(server);
  const second = await exportBody(server);
  t.equal(server.exportCache.hits, 1, 'the second export was a hit');
  t.ok(second.body.equals(first.body), 'byte-for-byte the streamed body');
  t.equal(second.status, 200);
  t.equal(second.headers['content-type'], first.headers['content-type']);
  t.equal(second.headers['cache-control'], 'no-store');
  t.equal(second.headers['transfer-encoding'], 'chunked', 'sent the way a streamed export is');
  const other = await exportBody(server, '?includeContentHtml=false');
  t.notOk(other.body.equals(first.body), 'other options are another export');
});

t.test('every change to what the export holds is seen by the next export', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1')]));
  const changes: [string, () => Promise<unknown>, (body: Buffer) => boolean][] = [
    ['a document updated', () => sql`UPDATE documents SET name = 'renamed' WHERE id = 'd1'`, (b) => names(b)[0] === 'renamed'],
    ['a document inserted', () => sql`
      INSERT INTO documents (id, book_id, slug, name, type, order_key, status)
      VALUES ('d3', 'b-u1', 'd3', 'third', 'document', 'a2', 1)`, (b) => names(b).includes('third')],
    ['a document deactivated', () => sql`UPDATE documents SET status = 0 WHERE id = 'd3'`, (b) => !names(b).includes('third')],
    ['a document deleted', () => sql`DELETE FROM documents WHERE id = 'd2'`, (b) => names(b).length === 1],
    ['the book renamed', () => sql`UPDATE books SET name = 'New name' WHERE id = 'b-u1'`,
      (b) => (JSON.parse(b.toString()) as { book: { name: string } }).book.name === 'New name'],
    ['the documents truncated', () => sql`TRUNCATE documents`, (b) => names(b).length === 0],
  ];
  for (const [what, change, seen] of changes) {
    await exportBody(server);
    const before = await exportBody(server);
    const hits = server.exportCache.hits;
    t.ok(hits > 0 && !seen(before.body), `${what}: cached before the change`);
    await change();
    const after = await exportBody(server);
    t.ok(seen(after.body), `${what}: the next export shows it`);
    t.equal(server.exportCache.hits, hits, `${what}: not served from memory`);
  }
});

t.test('an export larger than a quarter of EXPORT_CACHE_BYTES is streamed every time', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '2000' });
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0', { contentStr: 'x'.repeat(1000) })]));
  const a = await exportBody(server);
  const b = await exportBody(server);
  t.ok(a.body.length > 500);
  t.ok(b.body.equals(a.body));
  t.equal(server.exportCache.hits, 0);
  t.equal(server.exportCache.size, 0);
});

t.test('EXPORT_CACHE_BYTES=0: nothing is kept', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0' });
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0')]));
  await exportBody(server);
  await exportBody(server);
  t.equal(server.exportCache.hits, 0);
  t.equal(server.exportCache.size, 0);
});
