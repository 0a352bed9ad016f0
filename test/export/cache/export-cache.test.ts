/**
 * The cache of small export bodies (src/export/cache/export-cache.ts, sql/0003_export_version_random.sql):
 * a body is served again only while nothing it holds has changed, so every change below, deletion
 * and re-creation included, must be seen by the very next export (decisions.md D9.1), and a served
 * body is byte-for-byte the streamed one.
 */
import t from 'tap';
import { request } from 'undici';
import { ExportCache, KEEP_MS, type ExportCacheKey } from '../../../src/export/cache/export-cache.js';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../../helpers/app.js';
import { aboveTokenFloor } from '../../helpers/changes.js';

const AUTH = { authorization: 'Bearer kbx_u1' };
const key = (version: string, extra: Partial<ExportCacheKey> = {}): ExportCacheKey => ({
  tokenFloor: '1',
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
  c.set(key('1'), Buffer.alloc(101), 'token');
  t.equal(c.get(key('1')), undefined, 'a body above a quarter of the budget is not kept');
  c.set(key('1'), Buffer.from('one'), 'token');
  t.same(c.get(key('1'))?.body, Buffer.from('one'));
  t.equal(c.get(key('1', { includeContentHtml: false })), undefined, 'options are part of the key');
  t.equal(c.hits + c.misses, 0, 'a lookup counts nothing: the exporter counts what it served');
  c.counted(true);
  c.counted(false);
  c.counted(false);
  t.same([c.hits, c.misses], [1, 2]);
  for (const id of ['a', 'e', 'c', 'd', 'f']) c.set({ ...key('1'), bookId: id }, Buffer.alloc(100), 'token');
  t.ok(c.size <= 400, `stays within the budget (${c.size})`);
  t.equal(c.get({ ...key('1'), bookId: 'a' }), undefined, 'the least recently used went first');
  t.ok(c.get({ ...key('1'), bookId: 'f' }), 'the newest stayed');
});

t.test("ExportCache: versions are not ordered; asking for or keeping one drops the book's others", async (t) => {
  const c = new ExportCache(1000);
  const [v1, v2] = ['5e1e1a9c-0000-4000-8000-000000000001', '0a7b2c3d-0000-4000-8000-000000000002'];
  c.set(key(v1), Buffer.from('one'), 'token');
  c.set({ ...key(v1), bookId: 'other' }, Buffer.from('other'), 'token');
  t.same(c.get(key(v1))?.body, Buffer.from('one'));
  t.equal(c.get(key(v2)), undefined, 'a body is only served for the version it was read at');
  t.equal(c.get(key(v1)), undefined, 'asking for the current version dropped the other one');
  c.set(key(v2), Buffer.from('two'), 'token');
  c.set(key(v1), Buffer.from('one again'), 'token');
  t.same(
    c.get(key(v1))?.body,
    Buffer.from('one again'),
    'a body kept after another version is kept under its own (no order)',
  );
  t.equal(c.get(key(v2)), undefined, 'keeping one again dropped two');
  t.same(c.get({ ...key(v1), bookId: 'other' })?.body, Buffer.from('other'), 'other books keep theirs');
  t.equal(c.size, 'other'.length, 'asking for two dropped one again');
});

t.test('ExportCache: 0 bytes turns it off', async (t) => {
  const c = new ExportCache(0);
  c.set(key('1'), Buffer.from('x'), 'token');
  t.equal(c.get(key('1')), undefined);
  t.equal(c.size, 0);
  c.counted(false);
  t.equal(c.misses, 0, 'and counts no misses');
});

t.test("ExportCache: a body is kept under the change tokens' floor, and for KEEP_MS at most (D12.3)", async (t) => {
  let now = 1_000_000;
  const c = new ExportCache(1000, () => now);
  c.set(key('1'), Buffer.from('one'), 'token');
  t.equal(
    c.get(key('1', { tokenFloor: '2' })),
    undefined,
    'tokens expired since: the kept body carries a refused token',
  );
  now += KEEP_MS;
  t.same(c.get(key('1'))?.body, Buffer.from('one'), 'served up to KEEP_MS after it was kept');
  now += 1;
  t.equal(c.get(key('1')), undefined, 'then no more');
  t.equal(c.size, 0, 'and dropped');
});

async function exportBody(
  server: TestServer,
  query = '',
): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  const res = await request(`${server.url}/api/v1/open/books/kb/docs${query}`, { headers: AUTH });
  return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) };
}

const names = (body: Buffer) =>
  (JSON.parse(body.toString()) as { documents: { name: string }[] }).documents.map((d) => d.name);

t.test('a repeated export is served from memory with the same bytes and headers', async (t) => {
  const server = await startServer(t);
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0', { contentHtml: '<img src="x.png">' }), doc('d2', 'a1')]));
  const first = await exportBody(server);
  const second = await exportBody(server);
  t.equal(await server.cacheHits(), 1, 'the second export was a hit');
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
    [
      'a document updated',
      () => sql`UPDATE documents SET name = 'renamed' WHERE id = 'd1'`,
      (b) => names(b)[0] === 'renamed',
    ],
    [
      'a document inserted',
      () => sql`
      INSERT INTO documents (id, book_id, slug, name, type, order_key, status)
      VALUES ('d3', 'b-u1', 'd3', 'third', 'document', 'a2', 1)`,
      (b) => names(b).includes('third'),
    ],
    [
      'a document deactivated',
      () => sql`UPDATE documents SET status = 0 WHERE id = 'd3'`,
      (b) => !names(b).includes('third'),
    ],
    ['a document deleted', () => sql`DELETE FROM documents WHERE id = 'd2'`, (b) => names(b).length === 1],
    [
      'the book renamed',
      () => sql`UPDATE books SET name = 'New name' WHERE id = 'b-u1'`,
      (b) => (JSON.parse(b.toString()) as { book: { name: string } }).book.name === 'New name',
    ],
    ['the documents truncated', () => sql`TRUNCATE documents, rewrite_plans`, (b) => names(b).length === 0],
  ];
  for (const [what, change, seen] of changes) {
    await exportBody(server);
    const before = await exportBody(server);
    const hits = await server.cacheHits();
    t.ok(hits > 0 && !seen(before.body), `${what}: cached before the change`);
    await change();
    const after = await exportBody(server);
    t.ok(seen(after.body), `${what}: the next export shows it`);
    t.equal(await server.cacheHits(), hits, `${what}: not served from memory`);
  }
});

t.test('a knowledge base deleted and loaded again with the same ids is exported afresh (D9.1)', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1')]));
  await exportBody(server);
  await exportBody(server);
  const hits = await server.cacheHits();
  t.equal(hits, 1, 'cached before');
  for (const name of ['reloaded', 'reloaded again']) {
    await sql`DELETE FROM books WHERE id = 'b-u1'`;
    // The owner is already in the database (seed-format.md rule 1).
    await seed(sql, { users: [], books: simpleSeed([doc('d1', 'a0', { name }), doc('d2', 'a1')]).books });
    t.same(names((await exportBody(server)).body), [name, 'Doc d2'], `${name}: the new data`);
    t.equal(await server.cacheHits(), hits, `${name}: not served from memory`);
  }
});

t.test('restore-like replays of the same rows are exported afresh', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1'), doc('d3', 'a2')]));
  const original = await exportBody(server);
  const rows = await sql`SELECT * FROM documents ORDER BY id`;
  await sql`TRUNCATE documents, rewrite_plans`;
  const changed = rows.map((r) => (r.id === 'd2' ? { ...r, name: 'restored' } : r)).reverse();
  await sql`INSERT INTO documents ${sql(changed as Record<string, unknown>[])}`;
  await exportBody(server);
  t.same(
    names((await exportBody(server)).body),
    ['Doc d1', 'restored', 'Doc d3'],
    'truncated and inserted again in another order',
  );
  const hits = await server.cacheHits();
  await sql.begin(async (tx) => {
    await tx`DELETE FROM documents`;
    for (const r of rows) await tx`INSERT INTO documents ${tx(r)}`;
  });
  const replayed = await exportBody(server);
  t.ok(replayed.body.equals(original.body), 'deleted and inserted again as they were first: the first body');
  t.equal(await server.cacheHits(), hits, 'not served from memory');
});

t.test('an autosave of the editor formats keeps the version: the next export is served from memory', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1')]));
  const first = await exportBody(server);
  await sql`UPDATE documents SET content_yjs = '\x0102', content_json = '{"type":"doc"}' WHERE id = 'd1'`;
  await sql`UPDATE documents SET name = name, content_html = content_html`;
  const second = await exportBody(server);
  t.equal(await server.cacheHits(), 1, 'a hit');
  t.ok(second.body.equals(first.body));
  await sql`UPDATE documents SET name = 'renamed' WHERE id = 'd2'`;
  t.same(names((await exportBody(server)).body), ['Doc d1', 'renamed'], 'a change to an exported column is seen');
  t.equal(await server.cacheHits(), 1, 'and not served from memory');
});

t.test('tokens expired by the operator: the next full export carries a token a delta accepts (D12.3)', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1')]));
  const first = await exportBody(server);
  await sql`SELECT kbx_expire_change_tokens()`;
  const refused = await exportBody(server, `?changedSince=${String(first.headers['export-change-token'])}`);
  t.equal(refused.status, 410, 'the token from before is refused');
  await aboveTokenFloor(sql);
  const second = await exportBody(server);
  t.ok(second.body.equals(first.body), 'the same documents');
  t.not(second.headers['export-change-token'], first.headers['export-change-token'], 'under a new token');
  const delta = await exportBody(server, `?changedSince=${String(second.headers['export-change-token'])}`);
  t.equal(delta.status, 200, 'which a delta accepts');
  t.equal((JSON.parse(delta.body.toString()) as { meta: { count: number } }).meta.count, 0, 'nothing changed since');
});

t.test('an export larger than a quarter of EXPORT_CACHE_BYTES is streamed every time', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '2000' });
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0', { contentStr: 'x'.repeat(1000) })]));
  const a = await exportBody(server);
  const b = await exportBody(server);
  t.ok(a.body.length > 500);
  t.ok(b.body.equals(a.body));
  t.equal(await server.cacheHits(), 0);
});

t.test('EXPORT_CACHE_BYTES=0: nothing is kept', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0' });
  await seed(server.db.sql, simpleSeed([doc('d1', 'a0')]));
  await exportBody(server);
  await exportBody(server);
  t.equal(await server.cacheHits(), 0);
});
