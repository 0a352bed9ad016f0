/**
 * The built CLI (`node dist/src/cli/kb-export.js`, built by `npm run build`) run as a child process against
 * test databases: a fresh one wherever a test needs the schema missing or the tables in a known
 * state, one shared by the cases that only need the database left empty, and one holding the spec
 * example for keys and import-html, which touch tables the other does not count.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { verifyApiKey } from '../src/auth/api-key.js';
import type { Sql } from '../src/db/connect.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { untracked } from '../bench/lib/untracked.js';
import { CLI, ROOT } from './helpers/paths.js';

const EXAMPLE = path.join(ROOT, 'test/load/fixtures/spec-example.json');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with `env` on top of a clean environment (no DATABASE_URL unless given). */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (
      v !== undefined &&
      !/^(DATABASE_URL|KB_DEBUG|PORT|HOST|LOG_LEVEL|MEDIA_PROXY_PREFIX|REDIS_URL|TRUST_PROXY)$/.test(k)
    )
      base[k] = v;
  }
  return new Promise((resolve) => {
    execFile(
      ...untracked([process.execPath, CLI, ...args]),
      { cwd: ROOT, env: { ...base, LOG_LEVEL: 'silent', ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

async function counts(sql: Sql) {
  const [row] = await sql`
    SELECT (SELECT count(*)::int FROM users) AS users, (SELECT count(*)::int FROM api_keys) AS api_keys,
           (SELECT count(*)::int FROM books) AS books, (SELECT count(*)::int FROM documents) AS documents`;
  return { ...row };
}

const NO_STACK = /\n\s+at .+[:(]/;

// Each test has databases of its own, and spends most of its time waiting on the CLI's processes.
t.jobs = 3;

t.before(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
});

t.test('--help of every command exits 0 and names its options', async (t) => {
  const cases: [string[], RegExp[]][] = [
    [[], [/serve/, /migrate/, /load/, /keys/, /import-html/, /DATABASE_URL/]],
    [['serve'], [/--demo/]],
    [['migrate'], [/migrat/]],
    [['load'], [/<file>/]],
    [['keys'], [/create/, /revoke/]],
    [
      ['keys', 'create'],
      [/--user <id>/, /--expires-at <iso>/, /--id <id>/],
    ],
    [['keys', 'revoke'], [/<keyId>/]],
    [['import-html'], [/<dir>/, /--owner <userId>/, /--slug <slug>/, /--name <name>/, /--id <bookId>/]],
  ];
  for (const [command, patterns] of cases) {
    const r = await cli([...command, '--help']);
    const name = ['kb-export', ...command, '--help'].join(' ');
    t.equal(r.code, 0, `${name} exits 0`);
    t.match(r.stdout, /Usage: kb-export/, `${name} prints usage`);
    for (const p of patterns) t.match(r.stdout, p, `${name} names ${p}`);
  }
});

t.test('an unknown command or a missing argument exits non-zero', async (t) => {
  const unknown = await cli(['frobnicate']);
  t.not(unknown.code, 0);
  t.match(unknown.stderr, /unknown command/);
  const noFile = await cli(['load']);
  t.not(noFile.code, 0);
  t.match(noFile.stderr, /missing required argument 'file'/);
  const noUser = await cli(['keys', 'create']);
  t.not(noUser.code, 0);
  t.match(noUser.stderr, /--user/);
});

t.test('migrate prints what it applied and is idempotent', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  const first = await cli(['migrate'], { DATABASE_URL: db.url });
  t.equal(first.code, 0, first.stderr);
  t.match(first.stdout, /applied .*0001_init\.sql/);
  const [table] = await db.sql`SELECT to_regclass('public.documents') AS t`;
  t.ok(table!.t, 'the schema exists');
  const second = await cli(['migrate'], { DATABASE_URL: db.url });
  t.equal(second.code, 0, second.stderr);
  t.match(second.stdout, /nothing to apply/);
  t.notMatch(second.stdout, /0001_init/);
});

t.test('no command but migrate changes the schema: on an unmigrated database they stop and name migrate', async (t) => {
  const db = await createTestDatabase(t, { migrate: false });
  for (const args of [
    ['load', EXAMPLE],
    ['keys', 'revoke', 'k1'],
    ['keys', 'create', '--user', 'u1'],
  ]) {
    const r = await cli(args, { DATABASE_URL: db.url });
    t.not(r.code, 0, args.join(' '));
    t.match(
      r.stderr,
      /schema is behind: \d+ migration\(s\) pending \(0001_init\.sql, .*run `kb-export migrate`/,
      args.join(' '),
    );
  }
  const [table] = await db.sql`SELECT to_regclass('public.schema_migrations')::text AS t`;
  t.equal(table!.t, null, 'nothing was created');
});

t.test('load: the spec example, a bad file, a missing file', async (t) => {
  // The example's database is loaded by the first subtest and loaded again by the second; the
  // failing loads share one that each must leave empty, as is checked after each.
  const loaded = await createTestDatabase(t);
  const empty = await createTestDatabase(t);

  await t.test('the spec example loads and prints counts', async (t) => {
    const db = loaded;
    const r = await cli(['load', EXAMPLE], { DATABASE_URL: db.url });
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /loaded 1 users, 1 API keys, 1 knowledge bases, 1 documents/);
    t.same(await counts(db.sql), { users: 1, api_keys: 1, books: 1, documents: 1 });
  });

  await t.test('loading it again fails and changes nothing', async (t) => {
    const db = loaded;
    t.same(await counts(db.sql), { users: 1, api_keys: 1, books: 1, documents: 1 }, 'loaded once');
    const r = await cli(['load', EXAMPLE], { DATABASE_URL: db.url });
    t.not(r.code, 0);
    t.match(r.stderr, /duplicate.*u-alice/);
    t.same(await counts(db.sql), { users: 1, api_keys: 1, books: 1, documents: 1 });
  });

  await t.test('a missing required field in the 3rd document', async (t) => {
    const db = empty;
    const doc = (id: string, orderKey: string) => ({ id, slug: id, name: id, type: 'document', orderKey, status: 1 });
    const bad = doc('d-3', 'a2') as Record<string, unknown>;
    delete bad.orderKey;
    const dir = t.testdir({
      'bad.json': JSON.stringify({
        users: [{ id: 'u-1', name: 'One', apiKeys: [{ id: 'k-1', key: 'kbx_one' }] }],
        books: [
          { id: 'b-1', ownerId: 'u-1', slug: 'kb', name: 'KB', documents: [doc('d-1', 'a0'), doc('d-2', 'a1'), bad] },
        ],
      }),
    });
    const r = await cli(['load', path.join(dir, 'bad.json')], { DATABASE_URL: db.url });
    t.not(r.code, 0);
    t.match(r.stderr, /books\[0\]\.documents\[2\]/);
    t.match(r.stderr, /orderKey/);
    t.notMatch(r.stderr, NO_STACK, 'no stack trace');
    t.equal(r.stdout, '');
    t.same(await counts(db.sql), { users: 0, api_keys: 0, books: 0, documents: 0 }, 'the database is left empty');
  });

  await t.test('bad JSON: truncated, trailing garbage', async (t) => {
    const db = empty;
    const text = readFileSync(EXAMPLE, 'utf8');
    const dir = t.testdir({
      'truncated.json': text.slice(0, text.length / 2),
      'trailing.json': `${text}\n{"users": []}\n`,
    });
    for (const file of ['truncated.json', 'trailing.json']) {
      const r = await cli(['load', path.join(dir, file)], { DATABASE_URL: db.url });
      t.not(r.code, 0, `${file} exits non-zero`);
      t.match(r.stderr, /^kb-export: .*(not valid JSON|after the top-level object)/, `${file}: one clear line`);
      t.notMatch(r.stderr, NO_STACK, `${file}: no stack trace`);
    }
    t.same(await counts(db.sql), { users: 0, api_keys: 0, books: 0, documents: 0 });
  });

  await t.test('a missing file', async (t) => {
    const db = empty;
    const missing = path.join(ROOT, 'test/load/fixtures/no-such-seed.json');
    const r = await cli(['load', missing], { DATABASE_URL: db.url });
    t.not(r.code, 0);
    t.match(r.stderr, /cannot read/);
    t.ok(r.stderr.includes(missing), 'names the file');
    t.notMatch(r.stderr, NO_STACK, 'no stack trace');
  });
});

/**
 * One database with the spec example loaded, for keys (which counts api_keys) and import-html
 * (which counts documents): neither writes what the other counts, so they may share it and run at
 * once. Each test checks the load's exit code.
 */
const example: Promise<{ db: TestDatabase; load: Run }> = createTestDatabase(t).then(async (db) => ({
  db,
  load: await cli(['load', EXAMPLE], { DATABASE_URL: db.url }),
}));

t.test('keys create and revoke', async (t) => {
  const { db, load } = await example;
  t.equal(load.code, 0);

  const created = await cli(['keys', 'create', '--user', 'u-alice'], { DATABASE_URL: db.url });
  t.equal(created.code, 0, created.stderr);
  const key = /key \(shown once[^)]*\): (\S+)/.exec(created.stdout)?.[1];
  const id = /key id: (\S+)/.exec(created.stdout)?.[1];
  t.ok(key, `prints a key: ${created.stdout}`);
  t.ok(id, 'prints its id');
  t.match(key, /^kbx_/);
  t.equal((await verifyApiKey(db.sql, key!))?.userId ?? null, 'u-alice', 'the printed key works');
  const [stored] = await db.sql`SELECT count(*)::int AS n FROM api_keys WHERE strpos(api_keys::text, ${key!}) > 0`;
  t.equal(stored!.n, 0, 'the key itself is not stored');

  const revoked = await cli(['keys', 'revoke', id!], { DATABASE_URL: db.url });
  t.equal(revoked.code, 0, revoked.stderr);
  t.match(revoked.stdout, new RegExp(`revoked ${id}`));
  t.equal((await verifyApiKey(db.sql, key!))?.userId ?? null, null, 'the revoked key fails');
  t.equal((await verifyApiKey(db.sql, 'kbx_live_4f9c…'))?.userId ?? null, 'u-alice', 'other keys still work');

  const again = await cli(
    ['keys', 'create', '--user', 'u-alice', '--id', 'k-custom', '--expires-at', '2999-01-01T00:00:00Z'],
    {
      DATABASE_URL: db.url,
    },
  );
  t.equal(again.code, 0, again.stderr);
  t.match(again.stdout, /key id: k-custom/);
  const [custom] = await db.sql`SELECT expires_at FROM api_keys WHERE id = 'k-custom'`;
  t.equal((custom!.expires_at as Date).toISOString(), '2999-01-01T00:00:00.000Z');

  const nobody = await cli(['keys', 'create', '--user', 'nobody'], { DATABASE_URL: db.url });
  t.not(nobody.code, 0);
  t.match(nobody.stderr, /no user with id "nobody"/);
  t.notMatch(nobody.stdout, /kbx_/, 'no key printed');

  const badExpiry = await cli(['keys', 'create', '--user', 'u-alice', '--expires-at', 'soon'], {
    DATABASE_URL: db.url,
  });
  t.not(badExpiry.code, 0);
  t.match(badExpiry.stderr, /--expires-at/);

  const unknown = await cli(['keys', 'revoke', 'k-nope'], { DATABASE_URL: db.url });
  t.not(unknown.code, 0);
  t.match(unknown.stderr, /no API key with id "k-nope"/);

  const [n] = await db.sql`SELECT count(*)::int AS n FROM api_keys WHERE user_id = 'u-alice'`;
  t.equal(n!.n, 3, 'the example key, the revoked one and k-custom');
});

t.test('import-html imports the fixture corpus', async (t) => {
  const { db, load } = await example;
  t.equal(load.code, 0);
  const r = await cli(['import-html', 'test/import/fixtures/corpus', '--owner', 'u-alice', '--slug', 'corpus'], {
    DATABASE_URL: db.url,
  });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /imported 8 documents/);

  const [book] = await db.sql`SELECT id, owner_id, slug, name FROM books WHERE slug = 'corpus'`;
  t.same({ ...book }, { id: 'u-alice:corpus', owner_id: 'u-alice', slug: 'corpus', name: 'corpus' });
  const docs =
    await db.sql`SELECT id, type, parent_id, content_html FROM documents WHERE book_id = 'u-alice:corpus' ORDER BY order_key`;
  t.equal(docs.length, 8, 'folders with pages and pages, not media-only folders or other files');
  const byId = new Map(docs.map((d) => [d.id as string, d]));
  t.match(byId.get('u-alice:corpus:library'), { type: 'category', parent_id: null });
  t.match(byId.get('u-alice:corpus:library/deep'), { type: 'category', parent_id: 'u-alice:corpus:library' });
  t.same(
    docs.filter((d) => d.type === 'category').map((d) => d.id),
    ['u-alice:corpus:library', 'u-alice:corpus:library/deep', 'u-alice:corpus:library/deep/nested'],
  );
  const os = byId.get('u-alice:corpus:library/os.html');
  t.match(os, { type: 'document', parent_id: 'u-alice:corpus:library' });
  t.match(os!.content_html, /<IMG SRC="\/_images\/x\.png\?v=2#f"/, 'an image URL made root-relative');
  t.notMatch(os!.content_html, /\.\.\/_images/);

  const again = await cli(['import-html', 'test/import/fixtures/corpus', '--owner', 'u-alice', '--slug', 'corpus'], {
    DATABASE_URL: db.url,
  });
  t.not(again.code, 0, 'the same slug twice fails');
  const [n] = await db.sql`SELECT count(*)::int AS n FROM documents`;
  t.equal(n!.n, 9, 'nothing more imported');

  const nobody = await cli(['import-html', 'test/import/fixtures/corpus', '--owner', 'nobody', '--slug', 'x'], {
    DATABASE_URL: db.url,
  });
  t.not(nobody.code, 0);
  t.match(nobody.stderr, /unknown owner "nobody"/);

  const notDir = await cli(['import-html', 'test/import/fixtures/nope', '--owner', 'u-alice', '--slug', 'y'], {
    DATABASE_URL: db.url,
  });
  t.not(notDir.code, 0);
  t.match(notDir.stderr, /is not a folder/);
});

t.test('a bad configuration exits non-zero naming the variable, without a stack trace', async (t) => {
  for (const [env, args] of [
    [{ PORT: 'abc' }, ['serve']],
    [{ PORT: 'abc' }, ['migrate']],
    [{ DATABASE_URL: 'mysql://x' }, ['load', EXAMPLE]],
  ] as [Record<string, string>, string[]][]) {
    const r = await cli(args, env);
    const name = Object.keys(env)[0]!;
    t.not(r.code, 0, `${name} ${args[0]}: non-zero exit`);
    t.match(r.stderr, new RegExp(`configuration error: ${name}`), `${args[0]}: names ${name}`);
    t.notMatch(r.stderr, NO_STACK, `${args[0]}: no stack trace`);
    t.equal(r.stderr.trim().split('\n').length, 1, `${args[0]}: one line`);
  }
});
