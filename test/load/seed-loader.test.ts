/**
 * loadSeed through a real database (seed-format.md): the spec's example, defaults, every rule 6
 * failure loading nothing and naming the record, and a large seed streamed piece by piece. The tests
 * share one database, emptied before each.
 */
import { SeedError } from '../../src/errors.js';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import type { Sql } from '../../src/db/connect.js';
import { loadSeed } from '../../src/load/seed-loader.js';
import { createTestDatabase } from '../helpers/db.js';
import { sourceUrl } from '../helpers/paths.js';

/** The example of seed-format.md, with its placeholder `contentYjs` replaced by real base64. */
const EXAMPLE_TEXT = readFileSync(fileURLToPath(sourceUrl(import.meta.url, './fixtures/spec-example.json')), 'utf8');
const YJS_BASE64 = 'AQLd8+kBAAQBBXdlbGNvbWU=';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** The text in small pieces, so the loader really streams (never the whole file as one chunk). */
function pieces(text: string, size = 7): Readable {
  const parts: string[] = [];
  for (let i = 0; i < text.length; i += size) parts.push(text.slice(i, i + size));
  return Readable.from(parts);
}

function load(sql: Sql, data: unknown) {
  return loadSeed(sql, pieces(JSON.stringify(data)));
}

async function counts(sql: Sql) {
  const [row] = await sql<{ users: number; api_keys: number; books: number; documents: number }[]>`
    SELECT (SELECT count(*)::int FROM users) AS users, (SELECT count(*)::int FROM api_keys) AS api_keys,
           (SELECT count(*)::int FROM books) AS books, (SELECT count(*)::int FROM documents) AS documents`;
  return { ...row! };
}

const EMPTY = { users: 0, api_keys: 0, books: 0, documents: 0 };

// One database for the file, emptied before each test (they run one at a time): a database per
// test cost a CREATE DATABASE and every migration each time, most of this file's wall time.
const db = await createTestDatabase(t);

async function emptyDatabase(t: Test): Promise<Sql> {
  await db.sql`TRUNCATE users, api_keys, books, documents, rewrite_plans, document_removals, change_horizons`;
  t.same(await counts(db.sql), EMPTY, 'the shared database starts empty');
  return db.sql;
}

function doc(id: string, orderKey: string, extra: Json = {}): Json {
  return { id, slug: id, name: `Doc ${id}`, type: 'document', orderKey, status: 1, ...extra };
}

/** A user u-1 with a key owning book b-1 with documents d-1..d-3. */
function small(): Json {
  return {
    users: [{ id: 'u-1', name: 'One', apiKeys: [{ id: 'k-1', key: 'kbx_one' }] }],
    books: [
      {
        id: 'b-1',
        ownerId: 'u-1',
        slug: 'kb',
        name: 'KB',
        documents: [doc('d-1', 'a0'), doc('d-2', 'a1'), doc('d-3', 'a2')],
      },
    ],
  };
}

/**
 * Loads `input`, expects a SeedError whose message matches every pattern, and checks the
 * database holds exactly what it held before (`before`, default: nothing).
 */
async function rejects(
  t: Test,
  sql: Sql,
  input: Readable | Json,
  patterns: RegExp[],
  before: Awaited<ReturnType<typeof counts>> = EMPTY,
): Promise<void> {
  let error: unknown;
  try {
    await loadSeed(sql, input instanceof Readable ? input : pieces(JSON.stringify(input)));
  } catch (err) {
    error = err;
  }
  t.type(error, SeedError, 'fails with a SeedError');
  const message = (error as Error | undefined)?.message ?? '';
  for (const p of patterns) t.match(message, p, `message ${JSON.stringify(message)} matches ${p}`);
  t.same(await counts(sql), before, 'nothing was loaded');
}

t.test('the seed-format.md example loads', async (t) => {
  const sql = await emptyDatabase(t);
  const summary = await loadSeed(sql, pieces(EXAMPLE_TEXT));
  t.same(summary, { users: 1, apiKeys: 1, books: 1, documents: 1 });
  t.same(await counts(sql), { users: 1, api_keys: 1, books: 1, documents: 1 });

  const [user] = await sql`SELECT id, name FROM users`;
  t.same({ ...user }, { id: 'u-alice', name: 'Alice' });

  const [key] = await sql`SELECT id, user_id, key_hash, expires_at, revoked_at FROM api_keys`;
  t.equal(key!.id, 'k-alice-1');
  t.equal(key!.user_id, 'u-alice');
  t.equal(key!.expires_at, null);
  t.equal(key!.revoked_at, null);
  const plain = 'kbx_live_4f9c…';
  t.same(
    Buffer.from(key!.key_hash),
    createHash('sha256').update(plain, 'utf8').digest(),
    'key_hash is SHA-256 of the key',
  );
  const [leak] = await sql`SELECT count(*)::int AS n FROM api_keys a WHERE strpos(a::text, ${'kbx_live'}) > 0`;
  t.equal(leak!.n, 0, 'the plain key is stored nowhere in api_keys');
  const columns = (await sql`SELECT column_name FROM information_schema.columns WHERE table_name = 'api_keys'`).map(
    (r) => r.column_name,
  );
  t.notOk(columns.includes('key'), 'no key column');

  const [book] = await sql`SELECT * FROM books`;
  t.match(
    { ...book },
    { id: 'b-handbook', owner_id: 'u-alice', slug: 'handbook', name: 'Handbook', description: null, cover_image: null },
  );
  t.equal((book!.created_at as Date).toISOString(), '2024-03-01T10:00:00.000Z');
  t.equal((book!.updated_at as Date).toISOString(), '2024-03-02T10:00:00.000Z');

  const [d] =
    await sql`SELECT *, content_json::text AS json_text, jsonb_typeof(content_json) AS json_type FROM documents`;
  t.match(
    { ...d },
    {
      id: 'd-1',
      book_id: 'b-handbook',
      slug: 'welcome',
      name: 'Welcome',
      type: 'document',
      parent_id: null,
      order_key: 'a0',
      status: 1,
      description: null,
      emoji_info: null,
      cover_url: '/uploads/cover.png',
      cover_position: null,
      theme_id: null,
      background_theme_id: null,
      body_font_size: 'default',
      content_str: 'Welcome to the handbook.',
      content_html: '<p>Welcome</p><img src="/uploads/a.png">',
    },
  );
  t.same(d!.tags, ['intro']);
  t.equal((d!.created_at as Date).toISOString(), '2024-03-01T10:00:00.000Z');
  t.equal((d!.updated_at as Date).toISOString(), '2024-03-01T11:00:00.000Z');
  t.ok(Buffer.isBuffer(d!.content_yjs), 'content_yjs is bytea');
  t.same(Buffer.from(d!.content_yjs), Buffer.from(YJS_BASE64, 'base64'), 'content_yjs holds the base64-decoded bytes');
  t.equal(d!.json_type, 'object', 'content_json is a JSON object, not a string holding JSON');
  t.same(JSON.parse(d!.json_text as string), { type: 'doc', content: [] }, 'content_json holds the JSON value');
});

t.test('a whole-file chunk and an owner already in the database load too (rule 1)', async (t) => {
  const sql = await emptyDatabase(t);
  await loadSeed(sql, Readable.from([JSON.stringify({ users: [{ id: 'u-old', name: 'Old' }] })]));
  const summary = await load(sql, {
    books: [{ id: 'b-2', ownerId: 'u-old', slug: 's', name: 'S', documents: [doc('x', 'a0')] }],
  });
  t.same(summary, { users: 0, apiKeys: 0, books: 1, documents: 1 });
  t.same(await counts(sql), { users: 1, api_keys: 0, books: 1, documents: 1 });
});

t.test('a parentId may name a document that comes later in the same book', async (t) => {
  const sql = await emptyDatabase(t);
  const s = small();
  s.books[0].documents = [doc('child', 'a0', { parentId: 'parent' }), doc('parent', 'a1')];
  await load(sql, s);
  const [row] = await sql`SELECT parent_id FROM documents WHERE id = 'child'`;
  t.equal(row!.parent_id, 'parent');
});

t.test('contentJson is stored as the JSON value it is, whatever its type (rule 4)', async (t) => {
  const sql = await emptyDatabase(t);
  const values: [unknown, string][] = [
    [{ type: 'doc', content: [{ type: 'p', text: 'it\'s "q"' }] }, 'object'],
    [[1, 'x', { a: [] }], 'array'],
    ['just a string', 'string'],
    [42.5, 'number'],
    [false, 'boolean'],
  ];
  const s = small();
  s.books[0].documents = values.map(([v], i) => doc(`j-${i}`, `a${i}`, { contentJson: v }));
  s.books[0].documents.push(doc('j-none', 'b0'), doc('j-null', 'b1', { contentJson: null }));
  await load(sql, s);
  const rows =
    await sql`SELECT id, content_json::text AS text, jsonb_typeof(content_json) AS type FROM documents ORDER BY id`;
  const byId = new Map(rows.map((r) => [r.id as string, r]));
  values.forEach(([v, type], i) => {
    const r = byId.get(`j-${i}`)!;
    t.equal(r.type, type, `j-${i} is a JSON ${type}`);
    t.same(JSON.parse(r.text as string), v, `j-${i} round-trips`);
  });
  t.equal(byId.get('j-none')!.text, null, 'missing contentJson is NULL');
  t.equal(byId.get('j-null')!.text, null, 'null contentJson is NULL');
});

t.test('timestamps default to the time of loading', async (t) => {
  const sql = await emptyDatabase(t);
  const s = small();
  s.books[0].documents = [doc('d-1', 'a0'), doc('d-2', 'a1', { createdAt: null, updatedAt: null })];
  const before = Date.now();
  await load(sql, s);
  const after = Date.now();
  const within = (d: Date, what: string) =>
    t.ok(d.getTime() >= before - 2000 && d.getTime() <= after + 2000, `${what} ${d.toISOString()} is the load time`);
  const [book] = await sql`SELECT created_at, updated_at FROM books`;
  within(book!.created_at as Date, 'book created_at');
  within(book!.updated_at as Date, 'book updated_at');
  for (const d of await sql`SELECT id, created_at, updated_at FROM documents ORDER BY id`) {
    within(d.created_at as Date, `${d.id} created_at`);
    within(d.updated_at as Date, `${d.id} updated_at`);
  }
  const [user] = await sql`SELECT created_at FROM users`;
  within(user!.created_at as Date, 'user created_at');
});

t.test('bad JSON loads nothing', async (t) => {
  const sql = await emptyDatabase(t);
  // Truncated at many points, each one fed in small pieces.
  const cuts = [0, 1, 5, 20, 60, 150, 300, 500, 800, EXAMPLE_TEXT.trimEnd().length - 1];
  for (const cut of cuts) {
    await t.test(`truncated after ${cut} characters`, async (t) => {
      await rejects(t, sql, pieces(EXAMPLE_TEXT.slice(0, cut)), [/not valid JSON|unexpected end of file/]);
    });
  }
  for (const tail of [' garbage', '{}', ']', ',', '{"users": []}', ' 1']) {
    await t.test(`trailing ${JSON.stringify(tail)} in the same chunk`, async (t) => {
      await rejects(t, sql, Readable.from([EXAMPLE_TEXT + tail]), [/not valid JSON|after the top-level object/]);
    });
    await t.test(`trailing ${JSON.stringify(tail)} in a later chunk`, async (t) => {
      // The reader has long finished the top-level object when the garbage arrives.
      async function* late() {
        yield EXAMPLE_TEXT;
        await sleep(100);
        yield tail;
      }
      await rejects(t, sql, Readable.from(late()), [/not valid JSON|after the top-level object/]);
    });
  }
  await t.test('a top-level array', async (t) => {
    await rejects(t, sql, pieces('[]'), [/seed file/]);
  });
  await t.test('invalid token in the middle of a document', async (t) => {
    const bad = EXAMPLE_TEXT.replace('"orderKey": "a0"', '"orderKey": a0');
    t.not(bad, EXAMPLE_TEXT);
    await rejects(t, sql, pieces(bad), [/not valid JSON/]);
  });
});

t.test('a missing required field (rule 7) loads nothing and names the record', async (t) => {
  const sql = await emptyDatabase(t);
  const cases: [string, (s: Json) => void, RegExp[]][] = [
    ['users[].id', (s) => delete s.users[0].id, [/users\[0\]/, /"id"/]],
    ['users[].name', (s) => delete s.users[0].name, [/users\[0\] \(id "u-1"\)/, /"name"/]],
    ['apiKeys[].id', (s) => delete s.users[0].apiKeys[0].id, [/users\[0\]\.apiKeys\[0\]/, /"id"/]],
    ['apiKeys[].key', (s) => delete s.users[0].apiKeys[0].key, [/users\[0\]\.apiKeys\[0\] \(id "k-1"\)/, /"key"/]],
    ['books[].id', (s) => delete s.books[0].id, [/books\[0\]/, /"id"/]],
    [
      'books[].id (no documents)',
      (s) => {
        delete s.books[0].id;
        delete s.books[0].documents;
      },
      [/books\[0\]/, /"id"/],
    ],
    ['books[].ownerId', (s) => delete s.books[0].ownerId, [/books\[0\] \(id "b-1"\)/, /"ownerId"/]],
    ['books[].slug', (s) => delete s.books[0].slug, [/books\[0\] \(id "b-1"\)/, /"slug"/]],
    ['books[].name', (s) => delete s.books[0].name, [/books\[0\] \(id "b-1"\)/, /"name"/]],
    ...(['id', 'slug', 'name', 'type', 'orderKey', 'status'] as const).map(
      (f): [string, (s: Json) => void, RegExp[]] => [
        `documents[].${f}`,
        (s) => delete s.books[0].documents[2][f],
        [f === 'id' ? /books\[0\]\.documents\[2\]/ : /books\[0\]\.documents\[2\] \(id "d-3"\)/, new RegExp(`"${f}"`)],
      ],
    ),
    [
      'an empty string is missing too',
      (s) => (s.books[0].documents[2].slug = ''),
      [/books\[0\]\.documents\[2\]/, /"slug"/],
    ],
    ['null is missing too', (s) => (s.users[0].name = null), [/users\[0\]/, /"name"/]],
  ];
  for (const [name, mutate, patterns] of cases) {
    await t.test(name, async (t) => {
      const s = small();
      mutate(s);
      await rejects(t, sql, s, patterns);
    });
  }
});

t.test('bad field values load nothing and name the record', async (t) => {
  const sql = await emptyDatabase(t);
  for (const status of [1.5, '1', null, true, 2 ** 40]) {
    await t.test(`status ${JSON.stringify(status)}`, async (t) => {
      const s = small();
      s.books[0].documents[1].status = status;
      await rejects(t, sql, s, [/books\[0\]\.documents\[1\] \(id "d-2"\)/, /status/]);
    });
  }
  await t.test('status: other integers are fine (rule 3)', async (t) => {
    const s = small();
    s.books[0].documents[1].status = 0;
    s.books[0].documents[2].status = -7;
    await load(sql, s);
    t.same(
      (await sql`SELECT status FROM documents ORDER BY id`).map((r) => r.status),
      [1, 0, -7],
    );
    await sql`TRUNCATE users, api_keys, books, documents, rewrite_plans`;
  });
  for (const size of ['16', 'big', 'Default', 16, true]) {
    await t.test(`bodyFontSize ${JSON.stringify(size)}`, async (t) => {
      const s = small();
      s.books[0].documents[2].bodyFontSize = size;
      await rejects(t, sql, s, [/books\[0\]\.documents\[2\] \(id "d-3"\)/, /bodyFontSize/]);
    });
  }
  await t.test('bodyFontSize default, 14, 12 are fine (12 also as a number)', async (t) => {
    const s = small();
    s.books[0].documents.forEach((d: Json, i: number) => (d.bodyFontSize = ['default', '14', 12][i]));
    await load(sql, s);
    t.same(
      (await sql`SELECT body_font_size FROM documents ORDER BY id`).map((r) => r.body_font_size),
      ['default', '14', '12'],
    );
    await sql`TRUNCATE users, api_keys, books, documents, rewrite_plans`;
  });
  await t.test(
    'contentYjs that is not base64 (the spec example holds a placeholder) loads as its text bytes',
    async (t) => {
      const s = small();
      s.books[0].documents[0].contentYjs = 'AQL…base64…';
      await load(sql, s);
      const [d] = await sql`SELECT content_yjs FROM documents WHERE id = 'd-1'`;
      t.same(Buffer.from(d!.content_yjs), Buffer.from('AQL…base64…', 'utf8'));
      await sql`TRUNCATE users, api_keys, books, documents, rewrite_plans`;
    },
  );
  await t.test('a timestamp that is not one', async (t) => {
    const s = small();
    s.books[0].documents[1].createdAt = 'yesterday';
    await rejects(t, sql, s, [/books\[0\]\.documents\[1\] \(id "d-2"\)/, /createdAt/]);
  });
  // PostgreSQL would store them, but the export cannot format them (sql/0004_finite_timestamps.sql).
  for (const value of ['infinity', '-infinity', 'Infinity']) {
    await t.test(`a document's createdAt ${JSON.stringify(value)}`, async (t) => {
      const s = small();
      s.books[0].documents[2].createdAt = value;
      await rejects(t, sql, s, [/books\[0\]\.documents\[2\] \(id "d-3"\)/, /createdAt/, /ISO 8601/]);
    });
    await t.test(`a book's updatedAt ${JSON.stringify(value)}`, async (t) => {
      const s = small();
      s.books[0].updatedAt = value;
      await rejects(t, sql, s, [/books\[0\] \(id "b-1"\)/, /updatedAt/, /ISO 8601/]);
    });
  }
});

t.test('unknown owner', async (t) => {
  const sql = await emptyDatabase(t);
  const s = small();
  s.books[0].ownerId = 'u-nobody';
  await rejects(t, sql, s, [/books\[0\]/, /unknown owner "u-nobody"/]);
});

t.test('duplicate ids within the file', async (t) => {
  const sql = await emptyDatabase(t);
  await t.test('user id', async (t) => {
    const s = small();
    s.users.push({ id: 'u-1', name: 'Again' });
    await rejects(t, sql, s, [/duplicate/, /users\[1\]/, /u-1/]);
  });
  await t.test('API key id', async (t) => {
    const s = small();
    s.users[0].apiKeys.push({ id: 'k-1', key: 'kbx_other' });
    await rejects(t, sql, s, [/duplicate/, /k-1/]);
  });
  await t.test('the same API key twice', async (t) => {
    const s = small();
    s.users.push({ id: 'u-2', name: 'Two', apiKeys: [{ id: 'k-2', key: 'kbx_one' }] });
    await rejects(t, sql, s, [/duplicate/, /k-2/, /users\[1\]/]);
  });
  await t.test('document id in the same book', async (t) => {
    const s = small();
    s.books[0].documents[2].id = 'd-1';
    await rejects(t, sql, s, [/duplicate/, /d-1/]);
  });
  await t.test('document id in another book', async (t) => {
    const s = small();
    s.books.push({ id: 'b-2', ownerId: 'u-1', slug: 'kb2', name: 'KB2', documents: [doc('d-2', 'a0')] });
    await rejects(t, sql, s, [/duplicate/, /d-2/]);
  });
  await t.test('document id beyond one batch', async (t) => {
    const s = small();
    s.books[0].documents = Array.from({ length: 1200 }, (_, i) => doc(`d-${i}`, `k${String(i).padStart(5, '0')}`));
    s.books[0].documents.push(doc('d-3', 'z0'));
    await rejects(t, sql, s, [/duplicate/, /d-3/]);
  });
  await t.test('book id', async (t) => {
    const s = small();
    s.books.push({ id: 'b-1', ownerId: 'u-1', slug: 'other', name: 'Other', documents: [] });
    await rejects(t, sql, s, [/duplicate/, /books\[1\]/, /b-1/]);
  });
  await t.test('book slug of the same owner', async (t) => {
    const s = small();
    s.books.push({ id: 'b-2', ownerId: 'u-1', slug: 'kb', name: 'Other', documents: [] });
    await rejects(t, sql, s, [/duplicate/, /books\[1\]/, /slug/]);
  });
});

t.test('ids already in the database are an error, not an overwrite', async (t) => {
  const sql = await emptyDatabase(t);
  await loadSeed(sql, pieces(EXAMPLE_TEXT));
  const loaded = await counts(sql);
  const snapshot = async () => ({
    users: await sql`SELECT * FROM users ORDER BY id`,
    keys: await sql`SELECT * FROM api_keys ORDER BY id`,
    books: await sql`SELECT * FROM books ORDER BY id`,
    docs: await sql`SELECT * FROM documents ORDER BY id`,
  });
  const before = await snapshot();

  await t.test('the same file twice', async (t) => {
    await rejects(t, sql, pieces(EXAMPLE_TEXT), [/duplicate/, /users\[0\]/, /u-alice/], loaded);
  });
  await t.test('a new user and book, an existing document id', async (t) => {
    const s = small();
    s.books[0].documents[1].id = 'd-1';
    s.books[0].documents[1].name = 'Overwritten?';
    await rejects(t, sql, s, [/duplicate/, /d-1/], loaded);
  });
  await t.test('an existing book id', async (t) => {
    const s = small();
    s.books[0].id = 'b-handbook';
    await rejects(t, sql, s, [/duplicate/, /books\[0\]/, /b-handbook/], loaded);
  });
  await t.test('an existing API key id', async (t) => {
    const s = small();
    s.users[0].apiKeys[0].id = 'k-alice-1';
    await rejects(t, sql, s, [/duplicate/, /k-alice-1/], loaded);
  });
  t.same(await snapshot(), before, 'no row changed');
});

t.test('parentId must name a document of the same book', async (t) => {
  const sql = await emptyDatabase(t);
  await t.test('a missing document', async (t) => {
    const s = small();
    s.books[0].documents[2].parentId = 'd-nope';
    await rejects(t, sql, s, [/d-3/, /d-nope/]);
  });
  await t.test('a document of another book in the file', async (t) => {
    const s = small();
    s.books.push({
      id: 'b-2',
      ownerId: 'u-1',
      slug: 'kb2',
      name: 'KB2',
      documents: [doc('e-1', 'a0', { parentId: 'd-1' })],
    });
    await rejects(t, sql, s, [/e-1/, /d-1/]);
  });
  await t.test('a document of another book already in the database', async (t) => {
    await load(sql, small());
    const loaded = await counts(sql);
    const s = {
      books: [
        { id: 'b-2', ownerId: 'u-1', slug: 'kb2', name: 'KB2', documents: [doc('e-1', 'a0', { parentId: 'd-1' })] },
      ],
    };
    await rejects(t, sql, s, [/e-1/, /d-1/], loaded);
  });
});

t.test('order of the file (rule 1)', async (t) => {
  const sql = await emptyDatabase(t);
  await t.test('users after books', async (t) => {
    await rejects(t, sql, { books: [], users: [{ id: 'u-1', name: 'One' }] }, [/"users" must come before "books"/]);
  });
  await t.test('users after books whose owner exists', async (t) => {
    await load(sql, { users: [{ id: 'u-old', name: 'Old' }] });
    const loaded = await counts(sql);
    const s = {
      books: [{ id: 'b-1', ownerId: 'u-old', slug: 'kb', name: 'KB', documents: [doc('d-1', 'a0')] }],
      users: [{ id: 'u-new', name: 'New' }],
    };
    await rejects(t, sql, s, [/"users" must come before "books"/], loaded);
    await sql`TRUNCATE users, api_keys, books, documents, rewrite_plans`;
  });
  await t.test('a book id after its documents', async (t) => {
    const text =
      '{"users":[{"id":"u-1","name":"One"}],"books":[{"ownerId":"u-1","slug":"kb","name":"KB",' +
      `"documents":[${JSON.stringify(doc('d-1', 'a0'))}],"id":"b-1"}]}`;
    await rejects(t, sql, pieces(text), [/books\[0\]/, /"id" must come before "documents"/]);
  });
});

t.test('a large seed streams from a generator with bounded read-ahead', async (t) => {
  const sql = await emptyDatabase(t);
  // Twice the read-ahead bound checked below: a loader that drained the generator before writing
  // would run N documents ahead and fail it.
  const N = 4_000;
  let produced = 0;
  let read = 0;
  let maxLead = 0;
  const body = 'lorem ipsum dolor sit amet '.repeat(20);
  async function* generate(): AsyncGenerator<string> {
    yield '{"users":[{"id":"u-big","name":"Big","apiKeys":[{"id":"k-big","key":"kbx_big"}]}],';
    yield '"books":[{"id":"b-big","ownerId":"u-big","slug":"big","name":"Big","documents":[';
    for (let i = 0; i < N; i++) {
      const d = doc(`d-${i}`, `k${String(i).padStart(6, '0')}`, {
        parentId: i > 0 && i % 100 !== 0 ? `d-${i - (i % 100)}` : null,
        contentHtml: `<p>${body}${i}</p>`,
        contentStr: `${body}${i}`,
        contentJson: { type: 'doc', n: i },
        tags: ['t'],
      });
      const text = (i > 0 ? ',' : '') + JSON.stringify(d);
      // Each document in two pieces, split mid-token.
      const cut = Math.floor(text.length / 2);
      produced++;
      yield text.slice(0, cut);
      yield text.slice(cut);
    }
    yield ']}]}';
  }
  const summary = await loadSeed(sql, Readable.from(generate()), {
    onProgress: () => {
      read++;
      maxLead = Math.max(maxLead, produced - read);
    },
  });
  t.same(summary, { users: 1, apiKeys: 1, books: 1, documents: N });
  t.equal(read, N, 'progress reported once per document');
  t.same(await counts(sql), { users: 1, api_keys: 1, books: 1, documents: N });
  const [last] = await sql`SELECT parent_id, content_str FROM documents WHERE id = ${`d-${N - 1}`}`;
  t.equal(last!.parent_id, `d-${N - 100}`);
  t.equal(last!.content_str, `${body}${N - 1}`);
  // The generator is pulled as the loader reads, not drained ahead into memory.
  t.ok(maxLead < 2000, `the generator ran at most ${maxLead} documents ahead of the loader`);
});
