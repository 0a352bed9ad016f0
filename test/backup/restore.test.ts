/**
 * `kb-export restore` proves a backup: backup (a child process, over a real socket) → restore into
 * a fresh database → export from it gives the same documents, for JSON and NDJSON, compressed or
 * not. A truncated or malformed backup restores nothing, nor does a body without `success: true`:
 * those refusals share one empty target database, each checked to be still empty after it.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import zlib from 'node:zlib';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { startServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { untracked } from '../../bench/lib/untracked.js';
import { CLI } from '../helpers/paths.js';

const EXPORT = '/api/v1/open/books/kb/docs?excludeCategories=false';

function cli(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      ...untracked([process.execPath, CLI, ...args]),
      { env: { ...process.env, LOG_LEVEL: 'silent', ...env } },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

async function documentsOf(base: string, key: string): Promise<unknown[]> {
  const res = await request(`${base}${EXPORT}`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await res.body.json()) as { documents: unknown[]; meta: { count: number } };
  return body.documents;
}

const source = await createTestDatabase(t);
await seedGeneratedBooks(source.sql, [{ slug: 'kb', documents: 80, paragraphs: 2 }]);
const server = await startServer(t, {}, source);
const want = await documentsOf(server.url, 'kbx_u1');
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-restore-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** A fresh database with user `owner` and key `kbx_owner`. */
async function freshDatabase(t: { teardown(fn: () => unknown): void }) {
  const db = await createTestDatabase(t);
  await db.sql`INSERT INTO users (id, name) VALUES ('owner', 'Owner')`;
  await db.sql`INSERT INTO api_keys (id, user_id, key_hash) VALUES ('k-owner', 'owner', sha256('kbx_owner'::bytea))`;
  return db;
}

for (const [name, format] of [
  ['kb.json', 'json'],
  ['kb.ndjson.gz', 'ndjson'],
] as const) {
  t.test(`backup → restore into a fresh database → export: the same documents (${name})`, async (t) => {
    const file = path.join(dir, name);
    const b = await cli(
      [
        'backup',
        '--server',
        server.url,
        '--book',
        'kb',
        '--out',
        file,
        '--format',
        format,
        '--include-categories',
        '--quiet',
      ],
      {
        KB_EXPORT_API_KEY: 'kbx_u1',
      },
    );
    t.equal(b.code, 0, b.out);
    const target = await freshDatabase(t);
    const r = await cli(['restore', '--owner', 'owner', '--file', file], { DATABASE_URL: target.url });
    t.equal(r.code, 0, r.out);
    t.match(r.out, new RegExp(`restored "kb" for owner: ${want.length} documents`));
    const restored = await startServer(t, {}, target);
    t.same(
      await documentsOf(restored.url, 'kbx_owner'),
      want,
      'the restored knowledge base exports the same documents',
    );
  });
}

t.test(
  'a backup without categories: documents keep the parentId of a category the file does not hold, and the command says so',
  async (t) => {
    const file = path.join(dir, 'flat.json');
    t.equal(
      (
        await cli(['backup', '--server', server.url, '--book', 'kb', '--out', file, '--quiet'], {
          KB_EXPORT_API_KEY: 'kbx_u1',
        })
      ).code,
      0,
    );
    const target = await freshDatabase(t);
    const r = await cli(['restore', '--owner', 'owner', '--file', file], { DATABASE_URL: target.url });
    t.equal(r.code, 0, r.out);
    t.match(r.out, /\d+ of them name a parent the file does not hold .*their parentId is kept/);
    const restored = await startServer(t, {}, target);
    const flat = (await request(`${restored.url}/api/v1/open/books/kb/docs`, {
      headers: { authorization: 'Bearer kbx_owner' },
    }).then((res) => res.body.json())) as {
      documents: unknown[];
    };
    t.same(
      flat.documents,
      want.filter((d) => (d as { type: string }).type !== 'category'),
      'the same documents, categories excepted',
    );
  },
);

// Every refusal restores into this one database: each must leave it empty, which is checked after
// each, so a database per case would prove nothing more and costs a CREATE DATABASE and a migration.
const refusals = await freshDatabase(t);

t.test('a truncated or malformed backup restores nothing', async (t) => {
  const whole = readFileSync(path.join(dir, 'kb.json'));
  const cases: [string, Buffer | string][] = [
    ['truncated.json', whole.subarray(0, Math.floor(whole.length / 2))],
    ['no-count.ndjson', '{"success":true,"book":{"id":"b","slug":"s","name":"n"}}\n'],
    ['not-json.json', 'hello'],
  ];
  for (const [name, content] of cases) {
    const file = path.join(dir, name);
    writeFileSync(file, content);
    const r = await cli(['restore', '--owner', 'owner', '--file', file], { DATABASE_URL: refusals.url });
    t.not(r.code, 0, `${name}: refused`);
    t.notMatch(r.out, /\n\s+at /, `${name}: a message, not a stack trace`);
    const [{ books, documents }] =
      (await refusals.sql`SELECT (SELECT count(*) FROM books)::int AS books, (SELECT count(*) FROM documents)::int AS documents`) as unknown as [
        { books: number; documents: number },
      ];
    t.same({ books, documents }, { books: 0, documents: 0 }, `${name}: nothing restored`);
  }
});

t.test(
  'a body without success: true restores nothing, with exit 1 and a message saying so (JSON and NDJSON)',
  async (t) => {
    const json = readFileSync(path.join(dir, 'kb.json'), 'utf8');
    const ndjson = zlib.gunzipSync(readFileSync(path.join(dir, 'kb.ndjson.gz'))).toString('utf8');
    t.ok(
      json.startsWith('{"success":true,') && ndjson.startsWith('{"success":true,'),
      'the backups begin with success: true',
    );
    const cases: [string, string][] = [
      ['failed.json', json.replace('{"success":true,', '{"success":false,')],
      ['no-success.json', json.replace('{"success":true,', '{')],
      ['success-string.json', json.replace('{"success":true,', '{"success":"true",')],
      ['failed.ndjson', ndjson.replace('{"success":true,', '{"success":false,')],
      ['no-success.ndjson', ndjson.replace('{"success":true,', '{')],
    ];
    for (const [name, content] of cases) {
      const file = path.join(dir, name);
      writeFileSync(file, content);
      const r = await cli(['restore', '--owner', 'owner', '--file', file], { DATABASE_URL: refusals.url });
      t.equal(r.code, 1, `${name}: exit 1, as for a truncated file`);
      t.match(
        r.out,
        /^kb-export: .* is not a successful export: it does not begin with "success": true/,
        `${name}: says why`,
      );
      t.equal(r.out.trim().split('\n').length, 1, `${name}: one line`);
      const [{ books, documents }] =
        (await refusals.sql`SELECT (SELECT count(*) FROM books)::int AS books, (SELECT count(*) FROM documents)::int AS documents`) as unknown as [
          { books: number; documents: number },
        ];
      t.same({ books, documents }, { books: 0, documents: 0 }, `${name}: nothing restored`);
    }
  },
);
