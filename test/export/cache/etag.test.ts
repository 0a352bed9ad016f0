/**
 * ETag and If-None-Match over a real socket (decisions.md D9.1, D9.2): equal data and options give
 * equal ETags and byte-identical bodies; a change to the data, the book, the options or the media
 * prefix changes the ETag; a matching If-None-Match is a 304 with no body that runs no export, and
 * only after the rate limit, the key and the knowledge base were checked.
 */
import t from 'tap';
import { request } from 'undici';
import { doc, seed, simpleSeed, startServer } from '../../helpers/app.js';
import { createTestDatabase } from '../../helpers/db.js';
import { backends } from '../../helpers/pg-activity.js';

const PATH = '/api/v1/open/books/kb/docs';
const AUTH = { authorization: 'Bearer kbx_u1' };
const NO_CACHE = { EXPORT_CACHE_BYTES: '0' };

async function get(base: string, headers: Record<string, string> = {}, path = PATH) {
  const res = await request(`${base}${path}`, { headers: { ...AUTH, ...headers } });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, etag: res.headers.etag as string | undefined, headers: res.headers, body };
}

async function head(base: string, path = PATH): Promise<string> {
  const res = await request(`${base}${path}`, { method: 'HEAD', headers: AUTH });
  await res.body.dump();
  return res.headers.etag as string;
}

t.test('equal data and options: equal strong ETags, byte-identical bodies; HEAD gives the same ETag', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a1', { contentHtml: '<img src="x.png">' }), doc('d2', 'a2')]));
  for (const env of [NO_CACHE, {}]) {
    const server = await startServer(t, env, db);
    const a = await get(server.url);
    const b = await get(server.url);
    t.equal(a.status, 200);
    t.match(a.etag, /^"kbx[0-9.]+-[A-Za-z0-9_-]{27}"$/, 'a strong ETag');
    t.equal(b.etag, a.etag, `same ETag again (${env === NO_CACHE ? 'streamed twice' : 'the second from the cache'})`);
    t.ok(a.body.equals(b.body), 'byte-identical bodies');
    t.equal(await head(server.url), a.etag, 'HEAD announces the same ETag');
  }
});

t.test('every change that can change a byte changes the ETag', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a1', { contentHtml: '<img src="x.png">' })]));
  const server = await startServer(t, NO_CACHE, db);
  const seen = new Map<string, string>();
  const note = (what: string, etag: string | undefined) => {
    t.ok(etag, `${what}: an ETag`);
    for (const [other, e] of seen) t.not(etag, e, `${what} differs from ${other}`);
    seen.set(what, etag!);
  };
  note('initial', (await get(server.url)).etag);
  note('excludeCategories=false', (await get(server.url, {}, `${PATH}?excludeCategories=false`)).etag);
  note('includeContentHtml=false', (await get(server.url, {}, `${PATH}?includeContentHtml=false`)).etag);
  await db.sql`UPDATE documents SET name = 'renamed' WHERE id = 'd1'`;
  note('a document renamed', (await get(server.url)).etag);
  await db.sql`UPDATE documents SET status = 0 WHERE id = 'd1'`;
  note('a document deleted', (await get(server.url)).etag);
  await db.sql`DELETE FROM documents`;
  await db.sql`DELETE FROM books`;
  await seed(db.sql, { books: simpleSeed([doc('d1', 'a1', { contentHtml: '<img src="x.png">' })]).books });
  note('the book deleted and re-created with the same content', (await get(server.url)).etag);
  const other = await startServer(t, { ...NO_CACHE, MEDIA_PROXY_PREFIX: '/cdn/' }, db);
  note('another MEDIA_PROXY_PREFIX', (await get(other.url)).etag);
});

t.test('If-None-Match: a 304 with no body that runs no export; 401, 404 and 429 come first', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a1')]));
  const server = await startServer(t, NO_CACHE, db);
  const etag = await head(server.url);
  const exportPool = { applicationName: 'kbx-test-export', database: db.name };

  for (const inm of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
    const res = await get(server.url, { 'if-none-match': inm });
    t.equal(res.status, 304, `If-None-Match: ${inm}`);
    t.equal(res.body.length, 0, 'no body');
    t.equal(res.etag, etag, 'the ETag again');
  }
  t.same(await backends(db.sql, exportPool), [], 'no export connection was ever opened: no snapshot, no slot');
  const miss = await get(server.url, { 'if-none-match': '"kbx1-not-this-one"' });
  t.equal(miss.status, 200, 'another ETag: the export');
  t.equal(JSON.parse(miss.body.toString()).meta.count, 1);
  t.ok((await backends(db.sql, exportPool)).length > 0, 'and that one did use the export pool');

  const unauthorised = await request(`${server.url}${PATH}`, {
    headers: { authorization: 'Bearer kbx_nobody', 'if-none-match': '*' },
  });
  t.equal(unauthorised.statusCode, 401, 'a wrong key is 401, not 304');
  await unauthorised.body.dump();
  const missing = await get(server.url, { 'if-none-match': '*' }, '/api/v1/open/books/nope/docs');
  t.equal(missing.status, 404, 'an unknown book is 404, not 304');

  const limited = await startServer(t, { ...NO_CACHE, RATE_LIMIT_MAX: '1' }, db);
  t.equal((await get(limited.url, { 'if-none-match': etag })).status, 304);
  const over = await get(limited.url, { 'if-none-match': etag });
  t.equal(over.status, 429, 'over the rate limit: 429, not 304');
});

t.test(
  'compressed bodies carry a weak ETag, identity bodies a strong one; both match If-None-Match (D9.1)',
  async (t) => {
    const db = await createTestDatabase(t);
    await seed(db.sql, simpleSeed([doc('d1', 'a1', { contentHtml: '<img src="x.png">' }), doc('d2', 'a2')]));
    const server = await startServer(t, {}, db);
    const identity = await get(server.url);
    t.match(identity.etag, /^"kbx/, 'identity: strong');
    for (const encoding of ['gzip', 'br']) {
      const streamed = await get(server.url, { 'accept-encoding': encoding });
      const cached = await get(server.url, { 'accept-encoding': encoding });
      t.equal(streamed.headers['content-encoding'], encoding);
      t.match(streamed.etag, /^W\/"kbx/, `${encoding}: weak, its bytes depend on how it was compressed`);
      t.equal(cached.etag, streamed.etag, `${encoding}: the cached body has the same weak ETag`);
      t.not(streamed.etag!.slice(2), identity.etag, `${encoding}: another representation than identity`);
      const again = await get(server.url, { 'accept-encoding': encoding, 'if-none-match': streamed.etag! });
      t.equal(again.status, 304, `${encoding}: its weak ETag gets 304`);
    }
  },
);

t.test('a release that changes the rewriting rules changes every ETag (D9.1)', async (t) => {
  const real = await import('../../../src/export/rewrite/plans/rewrite-plan.js');
  const bumped = await t.mockImport<typeof import('../../../src/export/cache/etag.js')>(
    new URL('../../../src/export/cache/etag.js', import.meta.url).href,
    {
      [new URL('../../../src/export/rewrite/plans/rewrite-plan.js', import.meta.url).href]: {
        ...real,
        PLAN_RULES_VERSION: real.PLAN_RULES_VERSION + 1,
      },
    },
  );
  const today = await import('../../../src/export/cache/etag.js');
  const representation = {
    options: { excludeCategories: true, includeContentHtml: true },
    format: 'json',
    encoding: 'identity',
    changedSince: null,
    after: null,
  } as const;
  t.not(bumped.OUTPUT_FORMAT_VERSION, today.OUTPUT_FORMAT_VERSION, 'the output format version holds the rules version');
  t.not(
    bumped.exportEtag(representation, 'b1', 'v1', '/media/'),
    today.exportEtag(representation, 'b1', 'v1', '/media/'),
    'so the ETag changes',
  );
  t.equal(
    today.exportEtag(representation, 'b1', 'v1', '/media/'),
    today.exportEtag({ ...representation }, 'b1', 'v1', '/media/'),
    'and is stable otherwise',
  );
});
