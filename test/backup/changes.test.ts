/**
 * `kb-export changes` as a child process against a real server and PostgreSQL (decisions.md D12):
 * the first run emits every document as an upsert, the same objects a full export holds; a later
 * run emits exactly the documents that changed or entered and the ids that left (an autosave
 * emits nothing); a run killed mid-stream leaves its state file as it was and the next run sends
 * those changes again; an expired token exits 4 and writes nothing; a state of other options is a
 * usage error.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { request } from 'undici';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { CLI } from '../helpers/paths.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

interface Doc {
  id: string;
  [field: string]: unknown;
}
type Record_ = { op: 'upsert'; document: Doc } | { op: 'remove'; id: string };

const server = await startServer(t);
const sql = server.db.sql;
await seed(
  sql,
  simpleSeed([
    doc('d1', 'a1', { contentHtml: '<p>one</p><img src="1.png">' }),
    doc('d2', 'a2'),
    doc('d3', 'a3'),
    doc('d4', 'a4'),
    doc('d5', 'a5'),
    doc('c1', 'a6', { type: 'category' }),
  ]),
);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-changes-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const state = path.join(dir, 'kb.state');

const changes = (base = server.url, extra: string[] = []) =>
  runCli(['changes', '--server', base, '--book', 'kb', '--state', state, ...extra]);
const records = (stdout: Buffer): Record_[] =>
  stdout
    .toString()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record_);

/** The documents of a full export now, by id. */
async function exported(): Promise<Map<string, Doc>> {
  const res = await request(`${server.url}/api/v1/open/books/kb/docs`, { headers: { authorization: 'Bearer kbx_u1' } });
  const body = (await res.body.json()) as { documents: Doc[] };
  return new Map(body.documents.map((d) => [d.id, d]));
}

t.test('the first run emits every document as an upsert; a later one exactly the changes', async (t) => {
  const first = await changes();
  t.equal(first.code, 0, first.stderr);
  t.match(first.stderr, /no .*kb\.state yet: every document as an upsert/);
  t.match(first.stderr, /changes: 5 upserts and 0 removals \(a full read\)/);
  const all = await exported();
  t.same(
    records(first.stdout),
    [...all.values()].map((document) => ({ op: 'upsert', document })),
    'every document, as the export has it, in its order',
  );
  const token = JSON.parse(readFileSync(state, 'utf8')).token as string;
  t.match(token, /^[A-Za-z0-9_-]{20,}$/, 'the state keeps the token');

  await sql`UPDATE documents SET name = 'renamed' WHERE id = 'd1'`;
  await sql`UPDATE documents SET content_html = '<p>new</p>' WHERE id = 'd2'`;
  await sql`DELETE FROM documents WHERE id = 'd3'`;
  await sql`UPDATE documents SET status = 0 WHERE id = 'd4'`;
  await sql`UPDATE documents SET content_yjs = '\\x01'::bytea WHERE id = 'd5'`;
  await sql`UPDATE documents SET type = 'document' WHERE id = 'c1'`;
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('n1', 'b-u1', 'n1', 'New', 'document', 'a0', 1)`;
  const second = await changes();
  t.equal(second.code, 0, second.stderr);
  const now = await exported();
  t.same(
    records(second.stdout),
    [
      { op: 'upsert', document: now.get('n1') },
      { op: 'upsert', document: now.get('d1') },
      { op: 'upsert', document: now.get('d2') },
      { op: 'upsert', document: now.get('c1') },
      { op: 'remove', id: 'd3' },
      { op: 'remove', id: 'd4' },
    ],
    'created, renamed, HTML changed, entered: upserts in export order; deleted and inactive: removes; an autosave: nothing',
  );
  t.not(JSON.parse(readFileSync(state, 'utf8')).token, token, 'the state moved on');
  const third = await changes();
  t.equal(third.code, 0);
  t.equal(third.stdout.length, 0, 'nothing changed: no records');
  t.match(third.stderr, /0 upserts and 0 removals/);
});

// Some 700 KB of changes, of hex digests that compress to about half (the client asks for a compressed
// body): the kill at 100 KB of records lands well inside them, through a proxy throttled to 64 KB/s.
const BULK = 300;

t.test('killed mid-stream, the state stays and the next run sends those changes again', async (t) => {
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
    SELECT 'bulk-' || i, 'b-u1', 'bulk-' || i, 'Bulk ' || i, 'document', 'b' || lpad(i::text, 5, '0'), 1,
      (SELECT string_agg(md5(i || '-' || j), '') FROM generate_series(1, 70) j)
    FROM generate_series(1, ${BULK}) i`;
  const before = readFileSync(state);
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  proxy.throttle(64 * 1024);
  const child = spawn(
    process.execPath,
    [CLI, 'changes', '--server', `http://127.0.0.1:${proxy.port}`, '--book', 'kb', '--state', state],
    {
      env: { ...process.env, KB_EXPORT_API_KEY: 'kbx_u1' },
      stdio: ['ignore', 'pipe', 'ignore'],
    },
  );
  const got: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => got.push(b));
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.once('exit', (_code, signal) => resolve(signal)),
  );
  while (Buffer.concat(got).length < 100_000) await sleep(10);
  child.kill('SIGKILL');
  t.equal(await exited, 'SIGKILL', 'killed while records were flowing');
  const partial = Buffer.concat(got).toString().split('\n').slice(0, -1);
  t.ok(partial.length > 0 && partial.length < BULK, `some records were out (${partial.length})`);
  t.ok(readFileSync(state).equals(before), 'the state file is unchanged');
  t.same(
    readdirSync(dir).filter((f) => f.endsWith('.tmp')),
    [],
    'no temporary state file',
  );
  const next = await changes();
  t.equal(next.code, 0, next.stderr);
  const lines = next.stdout.toString().split('\n');
  t.ok(
    partial.every((l) => lines.includes(l)),
    'every record of the killed run is sent again, byte for byte',
  );
  t.equal(records(next.stdout).length, BULK, 'with the rest');
  t.not(readFileSync(state).toString(), before.toString(), 'and then the state moved on');
});

t.test('an expired token exits 4, writes nothing and keeps the state; other options are a usage error', async (t) => {
  const before = readFileSync(state);
  const other = await changes(server.url, ['--no-html']);
  t.equal(other.code, 2);
  t.match(other.stderr, /was kept for other options/);
  await sql`SELECT kbx_expire_change_tokens()`;
  const expired = await changes();
  t.equal(expired.code, 4, expired.stderr);
  t.match(
    expired.stderr,
    /can no longer answer the token in .*kb\.state \(410 CHANGE_TOKEN_EXPIRED.*remove .*kb\.state to start again/,
  );
  t.equal(expired.stdout.length, 0, 'no records');
  t.ok(readFileSync(state).equals(before), 'the state file is unchanged');
  rmSync(state);
  const again = await changes();
  t.equal(again.code, 0, again.stderr);
  t.equal(records(again.stdout).length, (await exported()).size, 'without a state: a full read again');
  t.ok(existsSync(state));
});
