/**
 * `kb-export backup --incremental` as a child process against a real server and PostgreSQL
 * (decisions.md D12): after random changes (created, renamed, HTML changed, moved, deleted, made
 * inactive, turned into a category or back), the merged file equals a full backup taken at the same
 * moment byte for byte (JSON and NDJSON; .br compared decompressed, as the merge compresses here
 * while a full backup may keep the server's bytes; .gz in the fallbacks), and its token record describes it; a
 * missing or altered old file, a token of other options and an expired token (410) mean a full
 * export, said on standard error; a kill -9 in the middle leaves the old file and its token record
 * as they were, and the next run merges. The full exports compared against are direct GETs of the
 * URL a full backup asks for: test/backup/backup.test.ts shows a full backup writes those bytes.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import zlib from 'node:zlib';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { exportUrl } from '../../src/backup/backup-command.js';
import type { Sql } from '../../src/db/connect.js';
import { startServer } from '../helpers/app.js';
import { runBackupCli } from '../helpers/backup-cli.js';
import { aboveTokenFloor } from '../helpers/changes.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { untracked } from '../../bench/lib/untracked.js';
import { CLI } from '../helpers/paths.js';

const SEED = Number(process.env.KBX_TEST_SEED ?? Date.now() % 100_000);
t.comment(`random changes with KBX_TEST_SEED=${SEED}`);

const db = await createTestDatabase(t);
// Some 600 KB: the delta of every document still takes seconds through the throttled proxy.
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 80, paragraphs: 2 }]);
const server = await startServer(t, { EXPORT_BATCH_SIZE: '16' }, db);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-incremental-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A file's bytes, decompressed by its name. */
function plain(file: string): Buffer {
  const bytes = readFileSync(file);
  if (file.endsWith('.gz')) return zlib.gunzipSync(bytes);
  if (file.endsWith('.br')) return zlib.brotliDecompressSync(bytes);
  return bytes;
}

const formatOf = (file: string) => (/\.ndjson/.test(file) ? 'ndjson' : 'json');
const backup = (file: string, extra: string[] = [], server_ = server.url) =>
  runBackupCli(['--server', server_, '--book', 'kb', '--out', file, '--format', formatOf(file), ...extra]);

/**
 * What a full backup to `file` with these options writes, written there: the body of a GET of the
 * URL it asks for. A GET in this process, as a child per reference would only add start-ups.
 */
async function fullExport(file: string, opts: { includeCategories?: boolean; html?: boolean } = {}): Promise<number> {
  const url = exportUrl({
    server: server.url,
    book: 'kb',
    includeCategories: opts.includeCategories ?? false,
    html: opts.html ?? true,
  });
  const accept = formatOf(file) === 'ndjson' ? 'application/x-ndjson' : 'application/json';
  const res = await request(url, { headers: { authorization: 'Bearer kbx_u1', accept } });
  writeFileSync(file, Buffer.from(await res.body.arrayBuffer()));
  return res.statusCode;
}

/** Seeded random numbers (mulberry32), so a failure can be replayed with KBX_TEST_SEED. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = random(SEED);
let created = 0;

/** `n` random changes of the kinds a delta must carry. */
async function randomChanges(sql: Sql, n: number): Promise<string[]> {
  const done: string[] = [];
  for (let i = 0; i < n; i++) {
    const ids = await sql<{ id: string }[]>`SELECT id FROM documents WHERE book_id = 'b-kb' ORDER BY id`;
    const id = ids[Math.floor(rand() * ids.length)]!.id;
    const kind = Math.floor(rand() * 8);
    const key = `a${Math.floor(rand() * 1e6).toString(36)}`;
    if (kind === 0) {
      const nid = `new-${SEED}-${created++}`;
      await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html) VALUES (${nid}, 'b-kb', ${nid}, 'Created', 'document', ${key}, 1, '<p>new <img src="n.png"></p>')`;
      done.push(`create ${nid}`);
    } else if (kind === 1) await sql`UPDATE documents SET name = ${`renamed ${i} ${SEED}`} WHERE id = ${id}`;
    else if (kind === 2)
      await sql`UPDATE documents SET content_html = ${`<p>changed ${i}</p><img src="./x${i}.png">`} WHERE id = ${id}`;
    else if (kind === 3)
      await sql`DELETE FROM documents WHERE id = ${id} AND NOT EXISTS (SELECT 1 FROM documents c WHERE c.parent_id = ${id})`;
    else if (kind === 4) await sql`UPDATE documents SET status = 1 - status WHERE id = ${id}`;
    else if (kind === 5)
      await sql`UPDATE documents SET type = CASE WHEN type = 'category' THEN 'document' ELSE 'category' END WHERE id = ${id}`;
    else if (kind === 6) await sql`UPDATE documents SET order_key = ${key} WHERE id = ${id}`;
    else await sql`UPDATE documents SET content_yjs = '\\x01'::bytea WHERE id = ${id}`;
    if (kind !== 0) done.push(`${['', 'rename', 'html', 'delete', 'status', 'type', 'move', 'autosave'][kind]} ${id}`);
  }
  return done;
}

/** The token record beside `file` describes its bytes. */
function recordMatches(t: Test, file: string, what: string): string {
  const record = JSON.parse(readFileSync(`${file}.token`, 'utf8')) as { token: string; size: number; sha256: string };
  const bytes = readFileSync(file);
  t.same(
    { size: record.size, sha256: record.sha256 },
    { size: bytes.length, sha256: sha256(bytes) },
    `${what}: PATH.token holds the size and digest of PATH`,
  );
  t.match(record.token, /^[A-Za-z0-9_-]{20,}$/, `${what}: and a change token`);
  return record.token;
}

t.test('after random changes the merged file equals a full backup byte for byte (JSON, NDJSON, .br)', async (t) => {
  const files = ['r.json', 'r.ndjson', 'r.json.br'].map(out);
  const firsts = await Promise.all(files.map((file) => backup(file, ['--incremental', '--include-categories'])));
  files.forEach((file, i) => {
    t.equal(firsts[i]!.code, 0, firsts[i]!.stderr);
    t.match(
      firsts[i]!.stderr,
      /no .*\.token yet: a full export/,
      `${path.basename(file)}: the first run is a full export`,
    );
    recordMatches(t, file, `${path.basename(file)}, first`);
  });
  for (let round = 0; round < 2; round++) {
    const changes = await randomChanges(db.sql, 10);
    const before = files.map((file) => recordMatches(t, file, `${path.basename(file)}, before round ${round}`));
    const merged = await Promise.all(files.map((file) => backup(file, ['--incremental', '--include-categories'])));
    const fulls = { json: out('full.json'), ndjson: out('full.ndjson') };
    for (const full of Object.values(fulls)) t.equal(await fullExport(full, { includeCategories: true }), 200);
    files.forEach((file, i) => {
      const name = `${path.basename(file)}, round ${round} (${changes.join(', ')})`;
      t.equal(merged[i]!.code, 0, merged[i]!.stderr);
      t.match(
        merged[i]!.stderr,
        /merged .*: \d+ documents, .* from a delta of \d+ changed or new and \d+ removed/,
        `${name}: merged, not downloaded in full`,
      );
      t.ok(plain(file).equals(plain(fulls[formatOf(file)])), `${name}: equals a full backup byte for byte`);
      t.not(recordMatches(t, file, name), before[i], `${name}: the token moved on`);
    });
  }
  const again = await backup(files[0]!, ['--incremental', '--include-categories']);
  t.match(again.stderr, /a delta of 0 changed or new and 0 removed/, 'nothing changed: an empty delta');
  t.ok(plain(files[0]!).equals(plain(out('full.json'))), 'and the same bytes');
});

t.test(
  'a full export when the old file is missing or altered, the token is for other options, or expired (410)',
  async (t) => {
    const file = out('f.ndjson.gz');
    const run = () => backup(file, ['--incremental']);
    const fullAgain = async (why: string, expect: RegExp, thenMerges = false) => {
      const r = await run();
      t.equal(r.code, 0, `${why}: ${r.stderr}`);
      t.match(r.stderr, expect, `${why}: says why`);
      t.match(r.stderr, /\nwrote /, `${why}: a full export was written`);
      const full = await fullExport(out('f-full.ndjson'));
      t.ok(plain(file).equals(plain(out('f-full.ndjson'))), `${why}: the whole export`);
      t.equal(full, 200);
      recordMatches(t, file, why);
      if (!thenMerges) return;
      const next = await run();
      t.match(next.stderr, /merged /, `${why}: the run after merges again`);
    };
    t.equal((await run()).code, 0);
    rmSync(file);
    await fullAgain('the old file removed', /is missing: a full export/, true);
    const changed = Buffer.from(readFileSync(file));
    changed[changed.length >> 1]! ^= 0xff;
    writeFileSync(file, changed);
    await fullAgain('one byte of the old file changed', /does not match .*\.token .*: a full export/);
    const other = await backup(file, ['--incremental', '--no-html']);
    t.match(other.stderr, /was kept for other options .*: a full export/, 'a token of other options: a full export');
    t.ok(plain(file).includes('"contentHtml":null'), 'written with the options asked for');
    await fullAgain('back to the first options', /was kept for other options/);
    await db.sql`SELECT kbx_expire_change_tokens()`;
    // A change after the expiry: an unchanged book may be answered from the export cache, with the
    // token of the snapshot that body was read from, which expired with the others.
    await db.sql`UPDATE documents SET name = 'after the expiry' WHERE id = (SELECT min(id) FROM documents WHERE book_id = 'b-kb' AND status = 1 AND type <> 'category')`;
    // So that the full export's new token is honoured by the run after it (and by the next test's).
    await aboveTokenFloor(db.sql);
    await fullAgain('an expired token', /410 CHANGE_TOKEN_EXPIRED.*: a full export/, true);
  },
);

t.test('kill -9 in the middle leaves the old file and its token record; the next run merges', async (t) => {
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  const base = `http://127.0.0.1:${proxy.port}`;
  const file = out('k.json');
  t.equal((await backup(file, ['--incremental'], base)).code, 0);
  const before = { body: readFileSync(file), record: readFileSync(`${file}.token`) };
  // Every document changes: a delta as large as the export, slowed so the kill lands inside it.
  await db.sql`UPDATE documents SET name = name || ' (edited)' WHERE book_id = 'b-kb'`;
  proxy.throttle(64 * 1024);
  const sent = proxy.stats().bytesToClient;
  const child = spawn(
    ...untracked([process.execPath, CLI, 'backup', '--server', base, '--book', 'kb', '--out', file, '--incremental']),
    {
      env: { ...process.env, KB_EXPORT_API_KEY: 'kbx_u1' },
      stdio: 'ignore',
    },
  );
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.once('exit', (_code, signal) => resolve(signal)),
  );
  while (proxy.stats().bytesToClient - sent < 64 * 1024) await sleep(10);
  child.kill('SIGKILL');
  t.equal(await exited, 'SIGKILL', 'killed mid-delta');
  proxy.throttle(null);
  t.ok(readFileSync(file).equals(before.body), 'the old file is intact');
  t.ok(readFileSync(`${file}.token`).equals(before.record), 'and its token record');
  const next = await backup(file, ['--incremental'], base);
  t.equal(next.code, 0, next.stderr);
  const m = /merged .*: (\d+) documents, .* from a delta of (\d+) changed or new/.exec(next.stderr);
  t.ok(m !== null && m[1] === m[2], `the next run merges a delta of every document: ${next.stderr}`);
  t.equal(await fullExport(out('k-full.json')), 200);
  t.ok(readFileSync(file).equals(readFileSync(out('k-full.json'))), 'and equals a full backup');
});

t.test('--incremental needs a file and does not go with --if-changed', async (t) => {
  const stdout = await backup('-', ['--incremental']);
  t.equal(stdout.code, 2);
  t.match(stdout.stderr, /--incremental needs a file/);
  const both = await backup(out('x.json'), ['--incremental', '--if-changed']);
  t.equal(both.code, 2);
  t.match(both.stderr, /do not go together/);
});
