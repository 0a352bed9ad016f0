/**
 * The HTTP surface of the app over a real socket: authentication (export-api.md 5, decisions.md D5),
 * rate limiting (export-api.md 8, D5.4, D5.5), errors (export-api.md 7, D7.3 and Fastify's own),
 * access rules of export-api.md 4.1 (rules 6, 8, 9), HEAD, response headers (D6.5) and odd slugs.
 * The body's contract is in test/export/contract.test.ts.
 */
import t from 'tap';
import { createHash, randomInt } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { call, type Headers, type Opts, type Res } from './helpers/http.js';
import { doc, redisKeyPrefix, seed, simpleSeed, startServer, type TestServer } from './helpers/app.js';

const exp = (slug: string, qs = '') => `/api/v1/open/books/${encodeURIComponent(slug)}/docs${qs}`;
const bearer = (key: string) => `Bearer ${key}`;

/** The section 7 envelope: JSON, exactly success/code/message, success false, nothing of a stack. */
function isEnvelope(t: TapTest, r: Res, status: number, code: string, what = ''): void {
  t.equal(r.status, status, `${what} status`);
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8', `${what} content-type`);
  t.same(Object.keys(r.json ?? {}), ['success', 'code', 'message'], `${what} exactly success, code, message`);
  t.equal(r.json?.success, false, `${what} success false`);
  t.equal(r.json?.code, code, `${what} code`);
  t.type(r.json?.message, 'string', `${what} message is a string`);
  t.notMatch(r.text, /\bat .*\(|\.ts:\d+|\.js:\d+|node_modules|stack/i, `${what} no stack trace`);
}

/** HEAD variant: the status and JSON content type, and no body at all. */
function isHeadError(t: TapTest, r: Res, status: number, what = ''): void {
  t.equal(r.status, status, `${what} status`);
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8', `${what} content-type`);
  t.equal(r.text, '', `${what} no body`);
}

/** The type of a subtest's `t`. */
type TapTest = Parameters<Parameters<typeof t.test>[0]>[0];

const LONG_SLUG = 'long-' + 'x'.repeat(1995); // 2000 characters
const UNICODE_SLUG = 'wissen-ü-日本-😀';

const SEED = {
  users: [
    {
      id: 'u1',
      name: 'u1',
      apiKeys: [
        { id: 'k-u1', key: 'kbx_u1' },
        { id: 'k-u1-future', key: 'kbx_u1_future', expiresAt: '2999-01-01T00:00:00Z' },
      ],
    },
    { id: 'u2', name: 'u2', apiKeys: [{ id: 'k-u2', key: 'kbx_u2' }] },
    { id: 'u-exp', name: 'expired', apiKeys: [{ id: 'k-exp', key: 'kbx_expired', expiresAt: '2020-01-01T00:00:00Z' }] },
    { id: 'u-rev', name: 'revoked', apiKeys: [{ id: 'k-rev', key: 'kbx_revoked', revokedAt: '2024-01-01T00:00:00Z' }] },
    { id: 'u-live-rev', name: 'to revoke', apiKeys: [{ id: 'k-live-rev', key: 'kbx_live_rev' }] },
    { id: 'u-live-exp', name: 'to expire', apiKeys: [{ id: 'k-live-exp', key: 'kbx_live_exp' }] },
  ],
  books: [
    { id: 'b-u1-kb', ownerId: 'u1', slug: 'kb', name: 'U1 KB', documents: [doc('d-u1-kb', 'a0')] },
    { id: 'b-u1-second', ownerId: 'u1', slug: 'second', name: 'U1 second', documents: [doc('d-u1-second', 'a0')] },
    { id: 'b-u1-unicode', ownerId: 'u1', slug: UNICODE_SLUG, name: 'Unicode', documents: [doc('d-u1-uni', 'a0')] },
    { id: 'b-u1-long', ownerId: 'u1', slug: LONG_SLUG, name: 'Long', documents: [doc('d-u1-long', 'a0')] },
    { id: 'b-u1-slash', ownerId: 'u1', slug: 'a/b', name: 'Slash', documents: [] },
    {
      id: 'b-u2-kb',
      ownerId: 'u2',
      slug: 'kb',
      name: 'U2 KB',
      documents: [doc('d-u2-kb', 'a0'), doc('d-u2-kb2', 'a1')],
    },
    { id: 'b-u2-theirs', ownerId: 'u2', slug: 'theirs', name: 'U2 only', documents: [doc('d-u2-theirs', 'a0')] },
    { id: 'b-exp', ownerId: 'u-exp', slug: 'kb', name: 'E', documents: [] },
    { id: 'b-rev', ownerId: 'u-rev', slug: 'kb', name: 'R', documents: [] },
    { id: 'b-live-rev', ownerId: 'u-live-rev', slug: 'kb', name: 'LR', documents: [] },
    { id: 'b-live-exp', ownerId: 'u-live-exp', slug: 'kb', name: 'LE', documents: [] },
  ],
};

let srv: TestServer;
t.before(async () => {
  srv = await startServer(t);
  await seed(srv.db.sql, SEED);
});

// ---------------------------------------------------------------- authentication (section 5, D5)

t.test('export-api.md 5 / 7 / D5.2: a missing Authorization header is 401 INVALID_API_KEY', async (t) => {
  const res = await call(srv.url, exp('kb'), { auth: null });
  isEnvelope(t, res, 401, 'INVALID_API_KEY');
  t.equal(res.headers['www-authenticate'], 'Bearer', 'RFC 6750: the 401 names the Bearer scheme');
});

t.test('D5.2: another scheme than Bearer is 401 INVALID_API_KEY', async (t) => {
  for (const auth of [
    `Basic ${Buffer.from('kbx_u1:').toString('base64')}`,
    'Basic kbx_u1',
    'Token kbx_u1',
    'kbx_u1',
    'Bearerkbx_u1',
    'Digest kbx_u1',
  ]) {
    isEnvelope(t, await call(srv.url, exp('kb'), { auth }), 401, 'INVALID_API_KEY', auth);
  }
});

t.test('D5.2: Bearer with an empty token is 401 INVALID_API_KEY', async (t) => {
  for (const auth of ['Bearer', 'Bearer ', 'Bearer    ', 'bearer']) {
    isEnvelope(t, await call(srv.url, exp('kb'), { auth }), 401, 'INVALID_API_KEY', JSON.stringify(auth));
  }
});

t.test('export-api.md 5 / D5.2: an unknown key is 401 INVALID_API_KEY', async (t) => {
  for (const key of [
    'kbx_nope',
    'KBX_U1',
    'kbx_U1',
    'kbx_u1x',
    'kbx_u',
    'kbx_u1 kbx_u1',
    createHash('sha256').update('kbx_u1').digest('hex'),
  ]) {
    isEnvelope(t, await call(srv.url, exp('kb'), { auth: bearer(key) }), 401, 'INVALID_API_KEY', key);
  }
});

t.test('export-api.md 5 / D5.3: an expired key is 401; a key expiring in the future works', async (t) => {
  isEnvelope(t, await call(srv.url, exp('kb'), { auth: bearer('kbx_expired') }), 401, 'INVALID_API_KEY');
  const ok = await call(srv.url, exp('kb'), { auth: bearer('kbx_u1_future') });
  t.equal(ok.status, 200);
  t.equal(ok.json.book.id, 'b-u1-kb');
});

t.test('export-api.md 5 / D5.3: a revoked key is 401', async (t) => {
  isEnvelope(t, await call(srv.url, exp('kb'), { auth: bearer('kbx_revoked') }), 401, 'INVALID_API_KEY');
});

t.test('D5.3: a revocation through SQL takes effect for the very next request', async (t) => {
  const before = await call(srv.url, exp('kb'), { auth: bearer('kbx_live_rev') });
  t.equal(before.status, 200, 'works before');
  t.equal(before.json.book.id, 'b-live-rev');
  await srv.db.sql`UPDATE api_keys SET revoked_at = now() WHERE id = 'k-live-rev'`;
  isEnvelope(t, await call(srv.url, exp('kb'), { auth: bearer('kbx_live_rev') }), 401, 'INVALID_API_KEY', 'next GET');
  isHeadError(t, await call(srv.url, exp('kb'), { auth: bearer('kbx_live_rev'), method: 'HEAD' }), 401, 'next HEAD');
});

t.test('D5.3: setting expires_at in the past through SQL takes effect for the very next request', async (t) => {
  t.equal((await call(srv.url, exp('kb'), { auth: bearer('kbx_live_exp') })).status, 200, 'works before');
  await srv.db.sql`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = 'k-live-exp'`;
  isEnvelope(t, await call(srv.url, exp('kb'), { auth: bearer('kbx_live_exp') }), 401, 'INVALID_API_KEY');
});

t.test('D5.2: the scheme word Bearer is matched case-insensitively', async (t) => {
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    const r = await call(srv.url, exp('kb'), { auth: `${scheme} kbx_u1` });
    t.equal(r.status, 200, scheme);
    t.equal(r.json?.book?.id, 'b-u1-kb', scheme);
  }
});

t.test('D5.5: an invalid or missing key asking for an unknown or foreign slug gets 401, never 404', async (t) => {
  for (const auth of [null, bearer('kbx_nope'), bearer('kbx_expired'), bearer('kbx_revoked'), 'Basic x']) {
    for (const slug of ['no-such-book', 'theirs', 'kb', 'x'.repeat(3000), '\0']) {
      isEnvelope(t, await call(srv.url, exp(slug), { auth }), 401, 'INVALID_API_KEY', `${auth} ${slug.slice(0, 20)}`);
    }
  }
});

t.test('D5.1: the database stores only the SHA-256 hash of each key, never the key', async (t) => {
  const rows = await srv.db.sql`SELECT row_to_json(k)::text AS j, key_hash FROM api_keys k WHERE id = 'k-u1'`;
  t.equal(rows.length, 1);
  t.same(
    Buffer.from(rows[0]!.key_hash),
    createHash('sha256').update('kbx_u1', 'utf8').digest(),
    'key_hash is SHA-256 of the key',
  );
  const all = await srv.db.sql`SELECT row_to_json(k)::text AS j FROM api_keys k`;
  for (const key of ['kbx_u1', 'kbx_u2', 'kbx_expired', 'kbx_revoked', 'kbx_u1_future']) {
    const b64 = Buffer.from(key).toString('base64');
    const hex = Buffer.from(key).toString('hex');
    for (const r of all) {
      t.notOk(
        r.j.includes(key) || r.j.includes(b64) || r.j.includes(hex),
        `no column holds ${key} (plain, base64 or hex)`,
      );
    }
  }
  const cols = await srv.db.sql`SELECT column_name FROM information_schema.columns WHERE table_name = 'api_keys'`;
  t.notOk(
    cols.some((c) => /^(key|api_key|token|secret|plain_key)$/.test(c.column_name)),
    'no plain-key column',
  );
});

// ---------------------------------------------------------------- ownership (4.1 rules 6, 8, 9; 7 rules 1, 2)

t.test(
  "export-api.md 4.1 rule 6 / 4.1 rule 9 / 7 rule 1 / 7 rule 2: another user's book is 404 BOOK_NOT_FOUND, not 403, indistinguishable from an unknown slug",
  async (t) => {
    const foreign = await call(srv.url, exp('theirs'));
    isEnvelope(t, foreign, 404, 'BOOK_NOT_FOUND', 'foreign');
    t.equal(foreign.json.message, 'Knowledge base not found');
    const unknown = await call(srv.url, exp('never-existed'));
    isEnvelope(t, unknown, 404, 'BOOK_NOT_FOUND', 'unknown');
    t.equal(unknown.json.message, 'Knowledge base not found');
    t.equal(foreign.text, unknown.text, 'same body');
    const strip = (h: Headers) => {
      // The request id differs by design (decisions.md D10.5), as do the date and the limit's counters.
      const { date: _d, 'x-ratelimit-remaining': _r, 'x-ratelimit-reset': _s, 'x-request-id': _i, ...rest } = h;
      return rest;
    };
    t.same(strip(foreign.headers), strip(unknown.headers), 'same headers');
    // And the other way round: u2 owns 'theirs', u1's 'second' is foreign to u2.
    const other = await call(srv.url, exp('second'), { auth: bearer('kbx_u2') });
    isEnvelope(t, other, 404, 'BOOK_NOT_FOUND', 'u2 asks u1 book');
    t.equal(other.json.message, 'Knowledge base not found');
    t.equal((await call(srv.url, exp('theirs'), { auth: bearer('kbx_u2') })).status, 200, 'the owner gets it');
  },
);

t.test("export-api.md 4.1 rule 8: any slug owned by the key's user works with the same key", async (t) => {
  for (const [slug, id] of [
    ['kb', 'b-u1-kb'],
    ['second', 'b-u1-second'],
    [UNICODE_SLUG, 'b-u1-unicode'],
    [LONG_SLUG, 'b-u1-long'],
    ['a/b', 'b-u1-slash'],
  ]) {
    const r = await call(srv.url, exp(slug!));
    t.equal(r.status, 200, slug!.slice(0, 20));
    t.equal(r.json?.book?.id, id);
    t.equal(r.json?.book?.slug, slug, 'book.slug is the requested slug');
  }
});

t.test('D7.1: the same slug owned by two users gives each owner their own book', async (t) => {
  const a = await call(srv.url, exp('kb'), { auth: bearer('kbx_u1') });
  const b = await call(srv.url, exp('kb'), { auth: bearer('kbx_u2') });
  t.equal(a.json.book.id, 'b-u1-kb');
  t.same(
    a.json.documents.map((d: { id: string }) => d.id),
    ['d-u1-kb'],
  );
  t.equal(b.json.book.id, 'b-u2-kb');
  t.same(
    b.json.documents.map((d: { id: string }) => d.id),
    ['d-u2-kb', 'd-u2-kb2'],
  );
});

// ---------------------------------------------------------------- slugs

t.test('export-api.md 4.1 / 7: a NUL byte (%00) in the slug is 404 BOOK_NOT_FOUND, not 500', async (t) => {
  for (const raw of ['%00', 'kb%00', '%00kb']) {
    const r = await call(srv.url, `/api/v1/open/books/${raw}/docs`);
    isEnvelope(t, r, 404, 'BOOK_NOT_FOUND', raw);
    t.equal(r.json.message, 'Knowledge base not found');
    isHeadError(t, await call(srv.url, `/api/v1/open/books/${raw}/docs`, { method: 'HEAD' }), 404, `HEAD ${raw}`);
  }
});

t.test('export-api.md 7: long unknown slugs (2000, 3000, 8000 characters) are 404 BOOK_NOT_FOUND', async (t) => {
  for (const slug of ['y'.repeat(2000), 'y'.repeat(3000), 'é'.repeat(1200), 'y'.repeat(8000)]) {
    const r = await call(srv.url, exp(slug));
    isEnvelope(t, r, 404, 'BOOK_NOT_FOUND', `${slug.length} chars`);
    t.equal(r.json.message, 'Knowledge base not found');
  }
  const long = await call(srv.url, exp(LONG_SLUG));
  t.equal(long.status, 200, 'an existing 2000-character slug works');
});

t.test('export-api.md 4.1: a Unicode slug works, percent-encoded as UTF-8', async (t) => {
  const r = await call(srv.url, exp(UNICODE_SLUG));
  t.equal(r.status, 200);
  t.equal(r.json.book.slug, UNICODE_SLUG);
  t.same(
    r.json.documents.map((d: { id: string }) => d.id),
    ['d-u1-uni'],
  );
  // Unicode normalisation is not applied: NFD form of "ü" is another slug.
  isEnvelope(t, await call(srv.url, exp(UNICODE_SLUG.normalize('NFD'))), 404, 'BOOK_NOT_FOUND', 'NFD');
});

// ---------------------------------------------------------------- headers, HEAD

t.test(
  'D6.5: a successful export has Content-Type application/json; charset=utf-8, Cache-Control no-store, and a chunked body',
  async (t) => {
    const r = await call(srv.url, exp('kb'));
    t.equal(r.status, 200);
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8');
    t.equal(r.headers['cache-control'], 'no-store');
    t.equal(r.headers['transfer-encoding'], 'chunked');
    t.equal(r.headers['content-length'], undefined, 'no Content-Length: the body is streamed');
    t.equal(r.json.success, true);
  },
);

t.test("D6.5 / D7.3: HEAD on the export path is 200 with the export's headers and no body", async (t) => {
  const r = await call(srv.url, exp('kb'), { method: 'HEAD' });
  t.equal(r.status, 200);
  t.equal(r.text, '');
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8');
  t.equal(r.headers['cache-control'], 'no-store');
  t.not(r.headers['content-length'], '0', 'no false Content-Length: 0 (GET has a body)');
  const q = await call(srv.url, exp('kb', '?excludeCategories=false&includeContentHtml=0&unknown=1'), {
    method: 'HEAD',
  });
  t.equal(q.status, 200, 'valid and unknown query parameters accepted');
});

t.test(
  'export-api.md 5 / 7 / D5.5: HEAD answers what GET would: 401 without a key, 404 for a foreign or unknown slug, 400 for a bad parameter',
  async (t) => {
    isHeadError(t, await call(srv.url, exp('kb'), { method: 'HEAD', auth: null }), 401, 'no key');
    isHeadError(t, await call(srv.url, exp('kb'), { method: 'HEAD', auth: bearer('kbx_nope') }), 401, 'bad key');
    isHeadError(
      t,
      await call(srv.url, exp('nope'), { method: 'HEAD', auth: bearer('kbx_nope') }),
      401,
      'bad key, unknown slug',
    );
    isHeadError(t, await call(srv.url, exp('theirs'), { method: 'HEAD' }), 404, 'foreign');
    isHeadError(t, await call(srv.url, exp('nope'), { method: 'HEAD' }), 404, 'unknown');
    isHeadError(t, await call(srv.url, exp('kb', '?excludeCategories=yes'), { method: 'HEAD' }), 400, 'bad parameter');
  },
);

t.test(
  'D7.3 (HEAD must not run a whole export): HEAD answers while the documents table is locked; GET cannot',
  async (t) => {
    const s = await startServer(t);
    await seed(s.db.sql, simpleSeed([doc('a', 'a0'), doc('b', 'a1')]));
    const lock = await s.db.sql.reserve();
    try {
      await lock`BEGIN`;
      await lock`LOCK TABLE documents IN ACCESS EXCLUSIVE MODE`;
      const head = await call(s.url, exp('kb'), { method: 'HEAD', signal: AbortSignal.timeout(3000) });
      t.equal(head.status, 200, 'HEAD does not read documents');
      t.equal(head.headers['cache-control'], 'no-store');
      await t.rejects(
        call(s.url, exp('kb'), { signal: AbortSignal.timeout(500) }),
        'GET, which runs the export, waits for the lock (so the lock is effective)',
      );
    } finally {
      await lock`ROLLBACK`;
      lock.release();
    }
    t.equal((await call(s.url, exp('kb'))).status, 200, 'GET works once the lock is gone');
  },
);

// ---------------------------------------------------------------- errors (section 7, D7.3, Fastify)

t.test('D7.3: unknown routes get 404 NOT_FOUND in the section 7 envelope', async (t) => {
  for (const path of [
    '/',
    '/nope',
    '/api/v1/open/books/kb',
    '/api/v1/open/books/kb/docs/extra',
    '/api/v1/open/books',
    '/api/v1/open/books/kb/documents',
    '/api/v1/open/books/kb/docs/',
  ]) {
    isEnvelope(t, await call(srv.url, path), 404, 'NOT_FOUND', path);
    isEnvelope(t, await call(srv.url, path, { auth: null }), 404, 'NOT_FOUND', `${path} without key`);
    isEnvelope(
      t,
      await call(srv.url, path, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } }),
      404,
      'NOT_FOUND',
      `POST ${path}`,
    );
  }
  isHeadError(t, await call(srv.url, '/nope', { method: 'HEAD' }), 404, 'HEAD /nope');
});

t.test('export-api.md 9 / D7.3: the version is part of the path; other versions are unknown routes', async (t) => {
  for (const path of [
    '/api/v2/open/books/kb/docs',
    '/api/v1/books/kb/docs',
    '/api/V1/open/books/kb/docs',
    '/v1/open/books/kb/docs',
  ]) {
    isEnvelope(t, await call(srv.url, path), 404, 'NOT_FOUND', path);
  }
});

t.test(
  'D7.3: POST, PUT, DELETE, PATCH, OPTIONS on the export path are 405 METHOD_NOT_ALLOWED with an Allow header',
  async (t) => {
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      const r = await call(srv.url, exp('kb'), { method });
      isEnvelope(t, r, 405, 'METHOD_NOT_ALLOWED', method);
      const allow = String(r.headers.allow ?? '')
        .split(/\s*,\s*/)
        .sort();
      t.same(allow, ['GET', 'HEAD'], `${method}: Allow lists GET and HEAD`);
      isEnvelope(
        t,
        await call(srv.url, exp('kb'), { method, auth: null }),
        405,
        'METHOD_NOT_ALLOWED',
        `${method} without key`,
      );
      isEnvelope(
        t,
        await call(srv.url, exp('no-such-book'), { method }),
        405,
        'METHOD_NOT_ALLOWED',
        `${method} unknown slug`,
      );
    }
  },
);

t.test(
  'D7.3: 405 and 404 do not depend on the request body (JSON, malformed JSON, unknown type, too large)',
  async (t) => {
    const bodies: [string, Record<string, string>, string][] = [
      ['valid JSON', { 'content-type': 'application/json' }, '{"a":1}'],
      ['malformed JSON', { 'content-type': 'application/json' }, '{bad'],
      ['unsupported type', { 'content-type': 'application/xml' }, '<a/>'],
      ['too large', { 'content-type': 'application/json' }, '"' + 'x'.repeat(1_100_000) + '"'],
    ];
    for (const [what, headers, body] of bodies) {
      for (const method of ['POST', 'PUT', 'PATCH']) {
        const r = await call(srv.url, exp('kb'), { method, headers, body });
        isEnvelope(t, r, 405, 'METHOD_NOT_ALLOWED', `${method} export path, ${what}`);
        t.equal(r.headers.allow, 'GET, HEAD', `${method} ${what}: Allow`);
        isEnvelope(
          t,
          await call(srv.url, '/nope', { method, headers, body }),
          404,
          'NOT_FOUND',
          `${method} /nope, ${what}`,
        );
      }
    }
  },
);

t.test(
  'D7.4: malformed percent-encoding in the path is a malformed request line: 400 BAD_REQUEST, not 500',
  async (t) => {
    for (const raw of ['%E0%A4%A', '%', '%zz', 'kb%C3', '%C3%28']) {
      const r = await call(srv.url, `/api/v1/open/books/${raw}/docs`);
      isEnvelope(t, r, 400, 'BAD_REQUEST', raw);
    }
  },
);

t.test(
  'export-api.md 7: the 500 EXPORT_FAILED envelope does not reveal its cause (D6.2: failure before any byte)',
  async (t) => {
    const s = await startServer(t);
    await seed(s.db.sql, simpleSeed([doc('a', 'a0')]));
    await s.db.sql`ALTER TABLE documents RENAME COLUMN content_str TO content_str_gone`;
    const r = await call(s.url, exp('kb'));
    isEnvelope(t, r, 500, 'EXPORT_FAILED');
    t.notMatch(r.text, /content_str|column|does not exist|postgres|select/i, 'no SQL or database message');
    t.equal(r.headers['cache-control'], undefined, "not the export's headers: nothing of the export was sent");
    // The server still answers afterwards.
    isEnvelope(t, await call(s.url, exp('nope')), 404, 'BOOK_NOT_FOUND');
  },
);

t.test('export-api.md 1 / 6: the export is read-only: no table changes', async (t) => {
  const snapshot = async () =>
    Promise.all(
      ['users', 'api_keys', 'books', 'documents'].map(
        async (tbl) =>
          (
            await srv.db.sql.unsafe(
              `SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h FROM ${tbl} x`,
            )
          )[0]!.h,
      ),
    );
  const before = await snapshot();
  t.equal((await call(srv.url, exp('kb', '?excludeCategories=false'))).status, 200);
  t.equal((await call(srv.url, exp('second'), { method: 'HEAD' })).status, 200);
  t.equal((await call(srv.url, exp('kb'), { auth: bearer('kbx_nope') })).status, 401);
  t.same(await snapshot(), before);
});

// ---------------------------------------------------------------- rate limiting (section 8, D5.4, D5.5)

let rlDb: TestDatabase;
t.test('rate limiting', async (t) => {
  rlDb = await createTestDatabase(t);
  await seed(rlDb.sql, simpleSeed([doc('a', 'a0')]));
  const limited = (env: Record<string, string> = {}) => startServer(t, { RATE_LIMIT_MAX: '3', ...env }, rlDb);

  const is429 = (t: TapTest, r: Res, what: string) => {
    isEnvelope(t, r, 429, 'RATE_LIMITED', what);
    t.match(String(r.headers['retry-after']), /^\d+$/, `${what}: Retry-After in seconds`);
    const s = Number(r.headers['retry-after']);
    t.ok(s >= 1 && s <= 60, `${what}: Retry-After within the window (${s})`);
  };

  t.test(
    'export-api.md 8 / 7 / D5.4: the 4th request in the window is 429 RATE_LIMITED with Retry-After, whatever key',
    async (t) => {
      const s = await limited();
      for (let i = 0; i < 3; i++) t.equal((await call(s.url, exp('kb'))).status, 200, `request ${i + 1}`);
      is429(t, await call(s.url, exp('kb')), 'valid key');
      is429(t, await call(s.url, exp('kb'), { auth: bearer('kbx_nope') }), 'invalid key');
      is429(t, await call(s.url, exp('kb'), { auth: null }), 'no key');
      is429(t, await call(s.url, exp('nope')), 'unknown slug');
      const head = await call(s.url, exp('kb'), { method: 'HEAD' });
      t.equal(head.status, 429, 'HEAD');
      t.ok(head.headers['retry-after'], 'HEAD carries Retry-After');
    },
  );

  t.test('D5.4: requests with invalid keys, no key or unknown slugs count', async (t) => {
    const s = await limited();
    t.equal((await call(s.url, exp('kb'), { auth: bearer('kbx_nope') })).status, 401);
    t.equal((await call(s.url, exp('kb'), { auth: null })).status, 401);
    t.equal((await call(s.url, exp('nope'))).status, 404);
    is429(t, await call(s.url, exp('kb')), 'a valid key after three failures');
  });

  t.test('D5.4: GET and HEAD share the count', async (t) => {
    const s = await limited();
    t.equal((await call(s.url, exp('kb'))).status, 200);
    t.equal((await call(s.url, exp('kb'), { method: 'HEAD' })).status, 200);
    t.equal((await call(s.url, exp('kb'), { method: 'HEAD' })).status, 200);
    is429(t, await call(s.url, exp('kb')), 'GET after GET, HEAD, HEAD');
    isHeadError(t, await call(s.url, exp('kb'), { method: 'HEAD' }), 429, 'HEAD');
  });

  t.test('D5.5: the rate limit is checked first: a limited client gets 429, not 401, 404 or 400', async (t) => {
    const s = await limited();
    for (let i = 0; i < 3; i++) await call(s.url, exp('kb'), { auth: bearer('kbx_nope') });
    is429(t, await call(s.url, exp('nope'), { auth: bearer('kbx_nope') }), 'invalid key and unknown slug');
    is429(t, await call(s.url, exp('nope')), 'valid key and unknown slug');
    is429(t, await call(s.url, exp('kb', '?excludeCategories=yes')), 'bad parameter');
  });

  t.test('D5.4: without TRUST_PROXY, X-Forwarded-For is ignored (spoofing it does not reset the limit)', async (t) => {
    const s = await limited();
    for (let i = 0; i < 3; i++) {
      t.equal((await call(s.url, exp('kb'), { headers: { 'x-forwarded-for': `203.0.113.${i + 1}` } })).status, 200);
    }
    is429(
      t,
      await call(s.url, exp('kb'), { headers: { 'x-forwarded-for': '198.51.100.77' } }),
      'a new X-Forwarded-For',
    );
    is429(t, await call(s.url, exp('kb')), 'no X-Forwarded-For');
  });

  t.test('D5.4: with TRUST_PROXY=true, each X-Forwarded-For address has its own limit', async (t) => {
    const s = await limited({ TRUST_PROXY: 'true' });
    const as = (ip: string, opts: Opts = {}) => call(s.url, exp('kb'), { ...opts, headers: { 'x-forwarded-for': ip } });
    for (let i = 0; i < 3; i++) t.equal((await as('203.0.113.10')).status, 200);
    is429(t, await as('203.0.113.10'), 'the same address');
    t.equal((await as('203.0.113.11')).status, 200, 'another address is not limited');
    t.equal((await as('203.0.113.11', { auth: bearer('kbx_nope') })).status, 401, 'and its own count goes on');
    t.equal((await as('203.0.113.11', { method: 'HEAD' })).status, 200);
    is429(t, await as('203.0.113.11'), 'until it reaches the limit too');
  });

  if (process.env.REDIS_URL) {
    t.test('D5.4: with REDIS_URL, the count lives in Redis and is shared by every instance', async (t) => {
      // One fleet: the same Redis and REDIS_KEY_PREFIX.
      const env = { REDIS_URL: process.env.REDIS_URL!, REDIS_KEY_PREFIX: redisKeyPrefix(), TRUST_PROXY: 'true' };
      const a = await limited(env);
      const b = await limited(env);
      // A random address, so runs sharing the Redis server within one window do not collide.
      const ip = `10.${randomInt(256)}.${randomInt(256)}.${randomInt(1, 255)}`;
      const h = { 'x-forwarded-for': ip };
      t.equal((await call(a.url, exp('kb'), { headers: h })).status, 200);
      t.equal(
        (await call(b.url, exp('kb'), { headers: h, auth: bearer('kbx_nope') })).status,
        401,
        'invalid key on the other instance',
      );
      t.equal((await call(a.url, exp('kb'), { headers: h, method: 'HEAD' })).status, 200);
      is429(t, await call(b.url, exp('kb'), { headers: h }), 'instance b after 3 requests across a and b');
      is429(t, await call(a.url, exp('kb'), { headers: h, auth: null }), 'instance a');
      const other = await limited({ ...env, REDIS_KEY_PREFIX: redisKeyPrefix() });
      t.equal(
        (await call(other.url, exp('kb'), { headers: h })).status,
        200,
        'an instance of another fleet (prefix) on the same Redis counts apart',
      );
    });
  }
});
