/**
 * Resuming a cut export (decisions.md D13): `?afterOrderKey=&afterId=` answers the documents after a
 * position in D1's order, from a new snapshot, as an export of its own; with the first response's
 * token, a delta turns the two parts into one snapshot's export (D13.2); every 200 carries
 * Export-Media-Prefix (D13.3).
 */
import { gunzipSync } from 'node:zlib';
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
  book: { id: string };
  documents: Doc[];
  removed?: string[];
  meta: { count: number };
}

async function get(
  server: TestServer,
  query = '',
  headers: Record<string, string> = {},
  method: 'GET' | 'HEAD' = 'GET',
) {
  const res = await request(`${server.url}${PATH}${query}`, { method, headers: { ...AUTH, ...headers } });
  const raw = Buffer.from(await res.body.arrayBuffer());
  return {
    status: res.statusCode,
    headers: res.headers,
    raw,
    text: raw.toString(),
    etag: res.headers.etag as string,
    token: res.headers['export-change-token'] as string,
  };
}

async function exportOf(server: TestServer, query = ''): Promise<Body & { token: string }> {
  const r = await get(server, query);
  if (r.status !== 200) throw new Error(`status ${r.status}: ${r.text}`);
  return { ...(JSON.parse(r.text) as Body), token: r.token };
}

const after = (d: Pick<Doc, 'orderKey' | 'id'>) =>
  `afterOrderKey=${encodeURIComponent(d.orderKey)}&afterId=${encodeURIComponent(d.id)}`;
const byteOrder = (a: Doc, b: Doc) =>
  Buffer.compare(Buffer.from(a.orderKey), Buffer.from(b.orderKey)) ||
  Buffer.compare(Buffer.from(a.id), Buffer.from(b.id));

const docs = () => [
  doc('d1', 'a1', { contentHtml: '<p><img src="one.png"></p>', cover: { url: 'covers/1.jpg', position: 'top' } }),
  doc('d2', 'a2'),
  doc('d3b', 'a3'),
  doc('d3a', 'a3'),
  doc('d4', 'a4'),
  doc('d5', 'a5'),
  doc('c1', 'a6', { type: 'category' }),
  doc('d7', 'b'),
];

t.test('the documents after a position, strictly, in the export order, as an export of its own (D13.1)', async (t) => {
  const server = await startServer(t);
  await seed(server.db.sql, simpleSeed(docs()));
  const full = await get(server);
  const body = JSON.parse(full.text) as Body;
  t.same(
    body.documents.map((d) => d.id),
    ['d1', 'd2', 'd3a', 'd3b', 'd4', 'd5', 'd7'],
    'ties on the order key go by id',
  );
  for (let k = 0; k < body.documents.length; k++) {
    const rest = await get(server, `?${after(body.documents[k]!)}`);
    t.equal(rest.status, 200);
    const part = JSON.parse(rest.text) as Body;
    t.same(
      part.documents,
      body.documents.slice(k + 1),
      `after ${body.documents[k]!.id}: exactly the documents that follow it`,
    );
    t.equal(part.meta.count, body.documents.length - k - 1, 'meta.count counts this response');
    t.same(part.book, body.book, 'with the book object');
    t.match(rest.token, /^[A-Za-z0-9_-]+$/, 'a change token of its own');
    t.not(rest.etag, full.etag, 'and an ETag of its own');
  }
  const first = body.documents[0]!;
  t.same(
    (await exportOf(server, `?${after({ orderKey: first.orderKey, id: 'd0' })}`)).documents,
    body.documents,
    'a position before the first document: all of them',
  );
  t.same(
    (await exportOf(server, `?${after({ orderKey: 'a3', id: 'd3aa' })}`)).documents.map((d) => d.id),
    ['d3b', 'd4', 'd5', 'd7'],
    'a position no document holds',
  );
  t.same(
    (await exportOf(server, `?${after({ orderKey: 'z', id: '' })}`)).documents,
    [],
    'a position after the last one: none',
  );
  t.same(
    (await exportOf(server, `?${after({ orderKey: '', id: '' })}`)).documents,
    body.documents,
    'the empty position sorts first',
  );
  const withCategories = await exportOf(server, `?excludeCategories=false&${after(body.documents[4]!)}`);
  t.same(
    withCategories.documents.map((d) => d.id),
    ['d5', 'c1', 'd7'],
    'with the same options as any export',
  );
});

t.test(
  'JSON, NDJSON and compressed bodies, HEAD and 304 of a resumed export; it is never taken from the cache',
  async (t) => {
    const server = await startServer(t);
    await seed(server.db.sql, simpleSeed(docs()));
    const query = `?${after({ orderKey: 'a3', id: 'd3b' })}`;
    const json = await get(server, query);
    const expected = (JSON.parse(json.text) as Body).documents;
    const ndjson = await get(server, query, { accept: 'application/x-ndjson' });
    const lines = ndjson.text
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    t.same(lines.slice(1, -1), expected, 'NDJSON: the same documents, one a line');
    t.same(lines.at(-1), { meta: { count: expected.length } }, 'and its own count last');
    const gzip = await get(server, query, { 'accept-encoding': 'gzip' });
    t.equal(gunzipSync(gzip.raw).toString(), json.text, 'gzip: the same bytes once decompressed');
    t.match(gzip.etag, /^W\//);
    const head = await get(server, query, {}, 'HEAD');
    t.match(head, { status: 200, etag: json.etag, raw: Buffer.alloc(0) }, 'HEAD: the ETag a GET has');
    t.equal(head.headers['export-media-prefix'], '/media/');
    t.equal((await get(server, query, { 'if-none-match': json.etag })).status, 304, '304 while nothing changed');
    const hits = await server.cacheHits();
    await get(server, query);
    t.equal(await server.cacheHits(), hits, 'a resumed export is read from a snapshot each time');
    await server.db.sql`UPDATE documents SET name = 'renamed' WHERE id = 'd7'`;
    t.equal(
      (await get(server, query, { 'if-none-match': json.etag })).status,
      200,
      'a change after the position: another ETag',
    );
  },
);

t.test('every 200 carries Export-Media-Prefix (D13.3)', async (t) => {
  const server = await startServer(t, { MEDIA_PROXY_PREFIX: 'https://cdn.example.com/m/' });
  await seed(server.db.sql, simpleSeed(docs()));
  const full = await get(server);
  const cached = await get(server);
  const delta = await get(server, `?changedSince=${full.token}`);
  const resumed = await get(server, `?${after({ orderKey: 'a1', id: 'd1' })}`);
  for (const [what, r] of [
    ['a streamed export', full],
    ['a kept one', cached],
    ['a delta', delta],
    ['a resumed one', resumed],
  ] as const) {
    t.equal(r.headers['export-media-prefix'], 'https://cdn.example.com/m/', what);
  }
  t.match(
    full.text,
    /"url":"https:\/\/cdn\.example\.com\/m\/covers\/1\.jpg"/,
    'the prefix the URLs were rewritten under',
  );
});

t.test(
  'a position one of whose values is missing, repeated, too long or has a NUL, or that comes with changedSince: 400',
  async (t) => {
    const server = await startServer(t);
    await seed(server.db.sql, simpleSeed(docs()));
    const { token } = await exportOf(server);
    for (const query of [
      '?afterOrderKey=a1',
      '?afterId=d1',
      '?afterOrderKey=a1&afterOrderKey=a2&afterId=d1',
      '?afterOrderKey=a1&afterId=d1&afterId=d2',
      `?afterOrderKey=${'k'.repeat(1025)}&afterId=d1`,
      '?afterOrderKey=a%001&afterId=d1',
      `?afterOrderKey=a1&afterId=d1&changedSince=${token}`,
    ]) {
      const r = await get(server, query);
      t.equal(r.status, 400, query.slice(0, 60));
      t.match(JSON.parse(r.text), { success: false, code: 'INVALID_PARAMETER', message: /after|changedSince/ });
    }
    t.equal(
      (await get(server, `?afterOrderKey=${'k'.repeat(1024)}&afterId=d1`)).status,
      200,
      '1,024 characters are taken',
    );
  },
);

t.test(
  'a cut export, the rest after its last whole document, and the delta since its token make one snapshot (D13.2)',
  async (t) => {
    const server = await startServer(t);
    const sql = server.db.sql;
    await seed(
      sql,
      simpleSeed([
        ...docs(),
        ...Array.from({ length: 20 }, (_, i) =>
          doc(`m${String(i).padStart(2, '0')}`, `c${String(i).padStart(2, '0')}`),
        ),
      ]),
    );
    const writes = {
      json: { changed: ['d2', 'm10'], later: 'm01', moved: ['d4', 'm15'], deleted: ['d1', 'm12'] },
      ndjson: { changed: ['d3a', 'm11'], later: 'm02', moved: ['d5', 'm16'], deleted: ['d3b', 'm13'] },
    };
    for (const format of ['json', 'ndjson'] as const) {
      const w = writes[format];
      const first = await exportOf(server);
      // The client received the first 9 documents whole before the cut.
      const held = first.documents.slice(0, 9);
      const last = held.at(-1)!;
      // Meanwhile a writer changes documents before and after the position, moves one across it, deletes and creates.
      await sql`UPDATE documents SET name = ${`changed ${format}`} WHERE id IN ${sql(w.changed)}`;
      await sql`UPDATE documents SET order_key = 'zz' WHERE id = ${w.moved[0]!}`;
      await sql`UPDATE documents SET order_key = 'a0' WHERE id = ${w.moved[1]!}`;
      await sql`DELETE FROM documents WHERE id IN ${sql(w.deleted)}`;
      await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES (${`n-${format}-1`}, 'b-u1', ${`n1${format}`}, 'N', 'document', 'a00', 1), (${`n-${format}-2`}, 'b-u1', ${`n2${format}`}, 'N', 'document', 'c05a', 1)`;
      const accept: Record<string, string> = format === 'ndjson' ? { accept: 'application/x-ndjson' } : {};
      const restRaw = await get(server, `?${after(last)}`, accept);
      const rest =
        format === 'json'
          ? (JSON.parse(restRaw.text) as Body).documents
          : (restRaw.text
              .trimEnd()
              .split('\n')
              .slice(1, -1)
              .map((l) => JSON.parse(l)) as Doc[]);
      await sql`UPDATE documents SET name = ${`later ${format}`} WHERE id = ${w.later}`;
      const delta = await exportOf(server, `?changedSince=${first.token}`);
      const union = new Map([...held, ...rest].map((d) => [d.id, d]));
      for (const id of delta.removed ?? []) union.delete(id);
      for (const d of delta.documents) union.set(d.id, d);
      const merged = [...union.values()].sort(byteOrder);
      const now = await exportOf(server);
      t.same(merged, now.documents, `${format}: the held part, the rest and the delta are the later snapshot's export`);
      t.ok(
        delta.documents.some((d) => d.id === w.moved[1]) && (delta.removed ?? []).includes(w.deleted[0]!),
        `${format}: moved and deleted documents came with the delta`,
      );
      // Back to a state the next format can start from.
      await sql`DELETE FROM documents WHERE id LIKE 'n-%'`;
    }
  },
);
