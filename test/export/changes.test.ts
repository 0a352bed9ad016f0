/**
 * Changes since an earlier export over HTTP (decisions.md D12): the Export-Change-Token on every
 * 200, a delta from `?changedSince=` that, applied to the earlier export, gives the later one (JSON
 * and NDJSON), a writer that committed after the earlier export began, tokens of other options,
 * forged, of a re-created book and expired, and the delta's own ETag and 304.
 */
import t from 'tap';
import { request } from 'undici';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';

const PATH = '/api/v1/open/books/kb/docs';
const AUTH = { authorization: 'Bearer kbx_u1' };

interface Doc {
  id: string;
  orderKey: string;
  [field: string]: unknown;
}

interface Body {
  documents: Doc[];
  removed?: string[];
  meta: { count: number };
}

async function get(server: TestServer, query = '', headers: Record<string, string> = {}) {
  const res = await request(`${server.url}${PATH}${query}`, { headers: { ...AUTH, ...headers } });
  const text = await res.body.text();
  return {
    status: res.statusCode,
    headers: res.headers,
    text,
    token: res.headers['export-change-token'] as string | undefined,
  };
}

async function exportOf(server: TestServer, query = ''): Promise<{ body: Body; token: string }> {
  const r = await get(server, query);
  if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
  return { body: JSON.parse(r.text) as Body, token: r.token! };
}

/** `before`'s documents with a delta applied as a client applies it, in export order (D1). */
function applied(before: Doc[], delta: Body): Doc[] {
  const out = new Map(before.map((d) => [d.id, d]));
  for (const id of delta.removed ?? []) out.delete(id);
  for (const d of delta.documents) out.set(d.id, d);
  return [...out.values()].sort(
    (a, b) =>
      Buffer.compare(Buffer.from(a.orderKey), Buffer.from(b.orderKey)) ||
      Buffer.compare(Buffer.from(a.id), Buffer.from(b.id)),
  );
}

const docs = () => [
  doc('d1', 'a1', { contentHtml: '<p>one</p><img src="1.png">' }),
  doc('d2', 'a2'),
  doc('d3', 'a3'),
  doc('d4', 'a4'),
  doc('c1', 'a5', { type: 'category' }),
];

t.test('every 200 carries an opaque, URL-safe Export-Change-Token (D12.1)', async (t) => {
  const server = await startServer(t);
  await seed(server.db.sql, simpleSeed(docs()));
  const full = await get(server);
  const cached = await get(server);
  const ndjson = await get(server, '', { accept: 'application/x-ndjson' });
  const head = await request(`${server.url}${PATH}`, { method: 'HEAD', headers: AUTH });
  await head.body.dump();
  for (const [what, token] of [
    ['GET', full.token],
    ['a cached GET', cached.token],
    ['NDJSON', ndjson.token],
    ['HEAD', head.headers['export-change-token']],
  ]) {
    t.match(token, /^[A-Za-z0-9_-]{20,}$/, `${what}: a URL-safe token`);
  }
  t.equal(cached.token, full.token, 'a kept body keeps the token of the snapshot it was read from');
});

t.test(
  'a delta applied to the earlier export gives the later one: changed, entered and left documents (D12.2)',
  async (t) => {
    const server = await startServer(t);
    const sql = server.db.sql;
    await seed(sql, simpleSeed(docs()));
    for (const query of ['', '?excludeCategories=false']) {
      const before = await exportOf(server, query);
      await sql`UPDATE documents SET name = ${`renamed ${query}`} WHERE id = 'd1'`;
      await sql`UPDATE documents SET content_html = ${`<p>new ${query}</p>`} WHERE id = 'd2'`;
      await sql`UPDATE documents SET status = 0 WHERE id = 'd3'`;
      await sql`UPDATE documents SET content_yjs = '\\x01'::bytea, content_json = '{"a":1}' WHERE id = 'd4'`;
      await sql`UPDATE documents SET type = 'document' WHERE id = 'c1'`;
      await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES (${`n${query.length}`}, 'b-u1', ${`n${query.length}`}, 'New', 'document', 'a0', 1)`;
      const delta = await exportOf(server, `${query}${query ? '&' : '?'}changedSince=${before.token}`);
      const after = await exportOf(server, query);
      const changed = delta.body.documents.map((d) => d.id);
      t.same(
        changed,
        [`n${query.length}`, 'd1', 'd2', 'c1'],
        `${query || 'default'}: changed and entering documents, in export order`,
      );
      t.notOk(changed.includes('d4'), 'an autosave of the editor formats is no change (D12.3)');
      t.same(delta.body.removed, ['d3'], 'the inactivated document left');
      t.equal(delta.body.meta.count, delta.body.documents.length, 'meta.count counts the documents');
      t.match(
        await (
          await get(server, `${query}${query ? '&' : '?'}changedSince=${before.token}`)
        ).text,
        /,"removed":\["d3"\],"meta":\{"count":\d+\}\}$/,
        'removed before meta, meta last',
      );
      t.same(
        applied(before.body.documents, delta.body),
        after.body.documents,
        'the earlier export with the delta applied is the later export',
      );
      // Back to the seed's state for the other option set.
      await sql`DELETE FROM documents WHERE id LIKE 'n%'`;
      await sql`UPDATE documents SET status = 1 WHERE id = 'd3'`;
      await sql`UPDATE documents SET type = 'category' WHERE id = 'c1'`;
    }
  },
);

t.test(
  'without contentHtml, a change to the HTML alone is no change; with it, it is (D12.3 "if and only if")',
  async (t) => {
    const server = await startServer(t);
    const sql = server.db.sql;
    await seed(sql, simpleSeed(docs()));
    const [lean, full] = [await exportOf(server, '?includeContentHtml=false'), await exportOf(server)];
    await sql`UPDATE documents SET content_html = '<p>only the HTML</p>' WHERE id = 'd1'`;
    await sql`UPDATE documents SET content_html = '<p>and the name</p>', name = 'renamed' WHERE id = 'd2'`;
    await sql`UPDATE documents SET content_html = '<p>first</p>' WHERE id = 'd3'`;
    await sql`UPDATE documents SET name = 'then the name' WHERE id = 'd3'`;
    const leanDelta = await exportOf(server, `?includeContentHtml=false&changedSince=${lean.token}`);
    t.same(
      leanDelta.body.documents.map((d) => d.id),
      ['d2', 'd3'],
      'd1 changed only its HTML, which this export does not carry',
    );
    t.same(
      applied(lean.body.documents, leanDelta.body),
      (await exportOf(server, '?includeContentHtml=false')).body.documents,
      'applied, the later export',
    );
    const fullDelta = await exportOf(server, `?changedSince=${full.token}`);
    t.same(
      fullDelta.body.documents.map((d) => d.id),
      ['d1', 'd2', 'd3'],
      'with contentHtml, d1 changed',
    );
    const again = await exportOf(
      server,
      `?includeContentHtml=false&changedSince=${(await exportOf(server, '?includeContentHtml=false')).token}`,
    );
    await sql`UPDATE documents SET content_html = '<p>later</p>' WHERE id = 'd4'`;
    t.same(again.body.documents, [], 'nothing since the latest export');
    t.same(
      (await exportOf(server, `?includeContentHtml=false&changedSince=${leanDelta.token}`)).body.documents,
      [],
      "and nothing since the delta's own token either",
    );
  },
);

t.test('a type change into a category leaves the excludeCategories=true export only', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed(docs()));
  const [withoutCategories, withCategories] = [
    await exportOf(server),
    await exportOf(server, '?excludeCategories=false'),
  ];
  await sql`UPDATE documents SET type = 'category' WHERE id = 'd2'`;
  const a = await exportOf(server, `?changedSince=${withoutCategories.token}`);
  const b = await exportOf(server, `?excludeCategories=false&changedSince=${withCategories.token}`);
  t.same(a.body.removed, ['d2'], 'excludeCategories=true: it left');
  t.same(b.body.removed, [], 'excludeCategories=false: it is still there');
  t.same(
    b.body.documents.map((d) => d.id),
    ['d2'],
    'as a changed document',
  );
});

t.test('NDJSON deltas: a removal line per id before the meta line (D12.2)', async (t) => {
  const server = await startServer(t);
  await seed(server.db.sql, simpleSeed(docs()));
  const before = await exportOf(server);
  await server.db.sql`DELETE FROM documents WHERE id IN ('d2', 'd4')`;
  const r = await get(server, `?changedSince=${before.token}`, { accept: 'application/x-ndjson' });
  const lines = r.text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  t.same(lines.slice(1), [{ removed: 'd2' }, { removed: 'd4' }, { meta: { count: 0 } }]);
});

t.test('a writer that began before an export and committed after it is in the next delta (D12.3)', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed(docs()));
  const writer = await sql.reserve();
  t.teardown(() => writer.release());
  await writer`BEGIN`;
  await writer`UPDATE documents SET name = 'slow writer' WHERE id = 'd2'`;
  const before = await exportOf(server);
  t.equal(before.body.documents.find((d) => d.id === 'd2')?.name, 'Doc d2', 'the export did not see the write');
  await writer`COMMIT`;
  const delta = await exportOf(server, `?changedSince=${before.token}`);
  t.same(
    delta.body.documents.map((d) => [d.id, d.name]),
    [['d2', 'slow writer']],
    'the delta has it',
  );
});

t.test('tokens of other options, forged, of a re-created book: 400; expired: 410 (D12.4)', async (t) => {
  const server = await startServer(t);
  const sql = server.db.sql;
  await seed(sql, simpleSeed(docs()));
  const { token } = await exportOf(server);
  const refused = async (query: string, status: number, code: string, what: string) => {
    const r = await get(server, query);
    t.equal(r.status, status, what);
    t.match(JSON.parse(r.text), { success: false, code }, `${what}: ${code}`);
  };
  await refused(`?includeContentHtml=false&changedSince=${token}`, 400, 'INVALID_PARAMETER', 'another option set');
  const forged = Buffer.from(token, 'base64url');
  forged[forged.length - 1] = forged[forged.length - 1]! ^ 1;
  await refused(`?changedSince=${forged.toString('base64url')}`, 400, 'INVALID_PARAMETER', 'a forged token');
  await refused('?changedSince=not-a-token', 400, 'INVALID_PARAMETER', 'a malformed token');
  const head = await request(`${server.url}${PATH}?changedSince=not-a-token`, { method: 'HEAD', headers: AUTH });
  await head.body.dump();
  t.equal(head.statusCode, 400, 'HEAD checks it too');

  await sql`DELETE FROM documents`;
  await sql`DELETE FROM books`;
  await seed(sql, { books: simpleSeed(docs()).books });
  await refused(
    `?changedSince=${token}`,
    400,
    'INVALID_PARAMETER',
    'a token of the book before it was deleted and re-created',
  );

  const fresh = await exportOf(server);
  await sql`SELECT kbx_expire_change_tokens()`;
  await refused(`?changedSince=${fresh.token}`, 410, 'CHANGE_TOKEN_EXPIRED', 'an expired token');
  t.ok((await exportOf(server)).body.documents.length > 0, 'and the full export goes on');
});

t.test('a delta has an ETag of its own, and 304 while nothing changed (D12.5)', async (t) => {
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0' });
  await seed(server.db.sql, simpleSeed(docs()));
  const full = await get(server);
  const delta = await get(server, `?changedSince=${full.token}`);
  t.not(delta.headers.etag, full.headers.etag, "not the full export's ETag");
  const again = await get(server, `?changedSince=${full.token}`, { 'if-none-match': delta.headers.etag as string });
  t.equal(again.status, 304, 'unchanged: 304');
  await server.db.sql`UPDATE documents SET name = 'x' WHERE id = 'd1'`;
  const changed = await get(server, `?changedSince=${full.token}`, { 'if-none-match': delta.headers.etag as string });
  t.equal(changed.status, 200, 'changed: the new delta');
  t.same(
    (JSON.parse(changed.text) as Body).documents.map((d) => d.id),
    ['d1'],
  );
});
