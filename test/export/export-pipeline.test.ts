/**
 * Streaming behaviour of the export over a real socket (undici) against real PostgreSQL:
 * chunked delivery and incremental parsing, failures before and after the first byte (D6.2, D6.3),
 * client aborts and stalled readers releasing their connection (D6.4), the snapshot (D6.1), its idle
 * allowance raised before the first batch is rewritten (D8.7) and the export pool's concurrency cap.
 * Memory is not asserted here (the benchmarks do that).
 */
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Readable } from 'node:stream';
import { BroadcastChannel } from 'node:worker_threads';
import t from 'tap';
import { request } from 'undici';
import { parser } from 'stream-json';
import { pick } from 'stream-json/filters/pick.js';
import { streamArray } from 'stream-json/streamers/stream-array.js';
import { generateDocuments } from '../../src/generate/generator.js';
import type { Sql } from '../../src/db/connect.js';
import { SeedWriter } from '../../src/load/seed-writer.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { HELD_WORKER_CHANNEL } from './rewrite/workers/fixtures/held-worker.js';

const BOOK = 'b-u1';
const AUTH = { authorization: 'Bearer kbx_u1' };
const EXPORT_APP = 'kbx-test-export';

interface Dataset {
  /** Ids of the documents a default export returns (active, not categories), in order. */
  ids: string[];
}

/** Seeds user u1 (key kbx_u1) with book `kb` holding `n` generated documents (src/generate/generator.ts). */
async function seedGenerated(sql: Sql, n: number, paragraphs = 2): Promise<Dataset> {
  await seed(sql, simpleSeed([]));
  const ids: string[] = [];
  await sql.begin(async (tx) => {
    const w = new SeedWriter(tx as never, 500);
    await w.begin();
    for (const d of generateDocuments({ bookId: BOOK, documents: n, paragraphs })) {
      if (d.status === 1 && d.type !== 'category') ids.push(d.id);
      await w.addDocument(BOOK, d);
    }
    await w.finish();
  });
  return { ids };
}

/** Export backends of database `db` that still hold a transaction or run a query. */
async function busyExportBackends(db: TestDatabase): Promise<{ pid: number; state: string; query: string }[]> {
  return db.sql<{ pid: number; state: string; query: string }[]>`
    SELECT pid, state, query FROM pg_stat_activity
    WHERE application_name = ${EXPORT_APP} AND datname = ${db.name}
      AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')`;
}

/** Polls until no export backend holds a transaction; returns the ms it took, or throws after `limitMs`. */
async function waitReleased(db: TestDatabase, limitMs: number): Promise<number> {
  const start = Date.now();
  for (;;) {
    const busy = await busyExportBackends(db);
    if (busy.length === 0) return Date.now() - start;
    if (Date.now() - start > limitMs) throw new Error(`export backends still busy: ${JSON.stringify(busy)}`);
    await sleep(25);
  }
}

/** Waits until an export backend sits in a transaction (the export is running). */
async function waitInTransaction(db: TestDatabase, limitMs = 5000): Promise<void> {
  const start = Date.now();
  while ((await busyExportBackends(db)).length === 0) {
    if (Date.now() - start > limitMs) throw new Error('no export transaction seen');
    await sleep(10);
  }
}

/** The last statement of database `db`'s export backend once it starts with `prefix`, else the last one seen in `limitMs`. */
async function lastStatement(db: TestDatabase, prefix: string, limitMs: number): Promise<string> {
  const start = Date.now();
  for (;;) {
    const [backend] = await db.sql<{ query: string }[]>`
      SELECT query FROM pg_stat_activity WHERE application_name = ${EXPORT_APP} AND datname = ${db.name} AND state = 'idle in transaction'`;
    const last = backend?.query ?? '';
    if (last.startsWith(prefix) || Date.now() - start > limitMs) return last;
    await sleep(10);
  }
}

function exportUrl(server: TestServer, slug = 'kb', query = ''): string {
  return `${server.url}/api/v1/open/books/${slug}/docs${query}`;
}

/** Reads exactly one chunk from a paused body without switching it to flowing mode. */
async function readOneChunk(body: Readable): Promise<Buffer> {
  for (;;) {
    const c = body.read() as Buffer | null;
    if (c !== null) return c;
    if (body.readableEnded) throw new Error('body ended before a chunk arrived');
    await once(body, 'readable');
  }
}

/** Reads the rest of `body` with a delay per chunk; resolves with the text and the error that ended it, if any. */
async function drain(body: Readable, chunks: Buffer[], delayMs = 0): Promise<{ text: string; error: unknown }> {
  let error: unknown = null;
  try {
    for await (const c of body) {
      chunks.push(c as Buffer);
      if (delayMs > 0) await sleep(delayMs);
    }
  } catch (err) {
    error = err;
  }
  return { text: Buffer.concat(chunks).toString('utf8'), error };
}

/** Parses a complete export body; returns its document ids. */
function idsOf(text: string): string[] {
  const body = JSON.parse(text) as { documents: { id: string }[]; meta: { count: number } };
  if (body.meta.count !== body.documents.length) throw new Error('meta.count differs from documents.length');
  return body.documents.map((d) => d.id);
}

// One read-only data set shared by the tests that do not change data: realistic documents, about
// 9 MB of JSON, far more than a paused reader's socket buffers hold (about 4 MB on loopback: the
// send buffer's ceiling and a receive window that does not grow while nothing is read). The
// 22 MB of 3,000 documents showed nothing more and made every export here cost twice as much.
const shared = await createTestDatabase(t);
const big = await seedGenerated(shared.sql, 1200);

t.test('the body streams in chunks and parses incrementally (D6.2, export-api.md 4.1 rules 2-4)', async (t) => {
  const server = await startServer(t, { EXPORT_BATCH_SIZE: '50' }, shared);
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['transfer-encoding'], 'chunked', 'chunked transfer encoding');
  t.equal(res.headers['content-length'], undefined, 'no content-length: the size is not known up front');
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8', 'D6.5');
  t.equal(res.headers['cache-control'], 'no-store', 'D6.5');

  const json = parser.asStream();
  const docs = pick.asStream({ filter: 'documents' });
  const items = streamArray.asStream();
  json.pipe(docs).pipe(items);
  const ids: string[] = [];
  let bytes = 0;
  let chunks = 0;
  let bytesAtFirstDoc = -1;
  let ended = false;
  let docsBeforeEnd = 0;
  items.on('data', ({ value }: { value: { id: string } }) => {
    if (ids.length === 0) bytesAtFirstDoc = bytes;
    if (!ended) docsBeforeEnd++;
    ids.push(value.id);
  });
  const itemsDone = once(items, 'end');
  for await (const c of res.body) {
    chunks++;
    bytes += (c as Buffer).length;
    if (!json.write(c)) await once(json, 'drain');
    // Give the parser a turn after the first chunks, so the first document surfaces mid-body.
    if (chunks <= 3) await sleep(5);
  }
  ended = true;
  json.end();
  await itemsDone;

  t.ok(chunks > 5, `body arrived in several chunks (${chunks})`);
  t.ok(bytes > 2_000_000, `body is several MB (${bytes} bytes)`);
  t.ok(
    bytesAtFirstDoc >= 0 && bytesAtFirstDoc < bytes / 2,
    `first document parsed after ${bytesAtFirstDoc} of ${bytes} bytes`,
  );
  t.ok(docsBeforeEnd > 0, `${docsBeforeEnd} documents parsed before the response ended`);
  t.equal(ids.length, big.ids.length, 'full count');
  t.strictSame(ids, big.ids, 'same documents in the same order (D1)');

  // Token walk over the whole body: meta.count is last (D2.5) and equals the count.
  const whole = await request(exportUrl(server), { headers: AUTH });
  const parsed = JSON.parse(await whole.body.text()) as { meta: { count: number }; documents: unknown[] };
  t.equal(parsed.meta.count, big.ids.length);
  t.equal(parsed.documents.length, big.ids.length);
});

t.test('rewrite workers give the same body byte for byte as rewriting on the event loop', async (t) => {
  const inline = await startServer(
    t,
    { EXPORT_BATCH_SIZE: '50', REWRITE_WORKERS: '0', EXPORT_CACHE_BYTES: '0' },
    shared,
  );
  // Every batch with a flagged contentHtml goes to the two workers, whatever its size.
  const workers = await startServer(
    t,
    { EXPORT_BATCH_SIZE: '50', REWRITE_WORKERS: '2', REWRITE_OFFLOAD_BYTES: '0', EXPORT_CACHE_BYTES: '0' },
    shared,
  );
  const get = async (server: TestServer, query: string) => {
    const res = await request(exportUrl(server, 'kb', query), { headers: AUTH });
    t.equal(res.statusCode, 200);
    return Buffer.from(await res.body.arrayBuffer());
  };
  for (const query of ['', '?excludeCategories=false']) {
    const [a, b] = await Promise.all([get(inline, query), get(workers, query)]);
    t.ok(a.includes('src=\\"/media/'), `${query || 'default'}: the body holds rewritten media URLs`);
    t.ok(a.equals(b), `${query || 'default'}: identical bodies (${a.length} bytes)`);
  }
  // Concurrent exports share the workers; each gets its own batches back.
  const bodies = await Promise.all([1, 2, 3].map(() => get(workers, '')));
  const expected = await get(inline, '');
  bodies.forEach((body, i) => t.ok(body.equals(expected), `concurrent export ${i + 1}`));
});

/** A rewrite worker module of test/export/rewrite/workers/fixtures. */
function workerFixture(name: string): URL {
  return new URL(`./rewrite/workers/fixtures/${name}.js`, import.meta.url);
}

t.test('a rewrite worker that dies before the first byte: a 500 EXPORT_FAILED envelope (D6.2)', async (t) => {
  // Stored plans would let the batch skip the worker: every flagged row goes to it here.
  const env = {
    EXPORT_BATCH_SIZE: '50',
    REWRITE_OFFLOAD_BYTES: '0',
    EXPORT_CACHE_BYTES: '0',
    REWRITE_PLANS: 'false',
    REWRITE_WORKERS: '1',
  };
  const server = await startServer(t, env, shared, { workerUrl: workerFixture('exits-worker') });
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 500, 'the first batch killed the worker');
  t.match(await res.body.json(), { success: false, code: 'EXPORT_FAILED' });
});

t.test('a rewrite worker that dies after the first byte: the body aborts, never parseable (D6.3)', async (t) => {
  const env = {
    EXPORT_BATCH_SIZE: '50',
    REWRITE_OFFLOAD_BYTES: '0',
    EXPORT_CACHE_BYTES: '0',
    REWRITE_PLANS: 'false',
    REWRITE_WORKERS: '1',
  };
  const server = await startServer(t, env, shared, { workerUrl: workerFixture('second-batch-exits-worker') });
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200, 'the first batch was rewritten');
  const { text, error } = await drain(res.body, []);
  t.ok(error !== null, 'the body ends in an error, not a clean end');
  t.throws(() => JSON.parse(text), 'and does not parse');
  t.notMatch(text.slice(-200), /"meta"/, 'no meta.count');
  const next = await request(exportUrl(server, 'kb', '?includeContentHtml=false'), { headers: AUTH });
  t.equal(next.statusCode, 200, 'the server lives on; an export without HTML needs no worker');
  t.equal(idsOf(await next.body.text()).length, big.ids.length);
});

t.test("the snapshot's idle allowance is raised for the first batch before it is rewritten (D8.7)", async (t) => {
  const db = await createTestDatabase(t);
  await seed(
    db.sql,
    simpleSeed([doc('d1', 'a0', { contentHtml: '<img src="a.png">' }), doc('d2', 'a1', { contentHtml: '<p>x</p>' })]),
  );
  const env = { REWRITE_OFFLOAD_BYTES: '0', EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false', REWRITE_WORKERS: '1' };
  const server = await startServer(t, env, db, { workerUrl: workerFixture('held-worker') });
  const worker = new BroadcastChannel(HELD_WORKER_CHANNEL);
  t.teardown(() => worker.close());
  const held = once(worker, 'message');
  const res = request(exportUrl(server), { headers: AUTH });
  await held;
  // The export's session waits while the worker holds the first batch: its last statement is the
  // cursor's FETCH unless the allowance was raised.
  const last = await lastStatement(db, 'SET LOCAL idle_in_transaction_session_timeout', 5000);
  worker.postMessage('release');
  t.match(
    last,
    /^SET LOCAL idle_in_transaction_session_timeout = \d+$/,
    `raised while the first batch was held: ${last}`,
  );
  const body = await (await res).body.text();
  t.same(idsOf(body), ['d1', 'd2'], 'then the export completes');
  t.match(body, /src=\\"\/media\/a.png\\"/, 'rewritten by the worker');
});

t.test('database connection killed mid-export aborts the response, never a parseable body (D6.3)', async (t) => {
  const server = await startServer(t, { EXPORT_BATCH_SIZE: '20', STALL_TIMEOUT_MS: '20000' }, shared);
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200, 'the status was sent before the failure');
  const chunks = [await readOneChunk(res.body)];
  const killed = await shared.sql<{ ok: boolean }[]>`
    SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
    WHERE application_name = ${EXPORT_APP} AND datname = ${shared.name}`;
  t.ok(killed.length >= 1 && killed.every((r) => r.ok), 'export backend terminated while the client reads slowly');
  const start = Date.now();
  const { text, error } = await drain(res.body, chunks, 2);
  t.ok(error, `the body errored: ${(error as { code?: string })?.code ?? String(error)}`);
  t.ok(Date.now() - start < 15_000, 'within a bounded time');
  t.throws(() => JSON.parse(text), 'what was received does not parse');
  t.notOk(text.trimEnd().endsWith('}}'), 'the body does not end like a complete export');
  t.notMatch(text, /"meta"/, 'no meta: the closing was never written');
  t.ok(text.startsWith('{"success":true,"book":'), 'it was a real export body');

  // The server recovers: the pool opens a new connection for the next export.
  const next = await request(exportUrl(server), { headers: AUTH });
  t.equal(next.statusCode, 200);
  t.strictSame(idsOf(await next.body.text()), big.ids, 'the next export is complete');
});

t.test(
  'an error in the book lookup/cursor declaration is a 500 EXPORT_FAILED envelope with no internals (D6.2, section 7)',
  async (t) => {
    const server = await startServer(t, {});
    await seed(
      server.db.sql,
      simpleSeed([{ id: 'd1', slug: 'd1', name: 'D1', type: 'document', orderKey: 'a0', status: 1 }]),
    );
    await server.db.sql.unsafe('ALTER TABLE documents RENAME TO documents_moved');
    const res = await request(exportUrl(server), { headers: AUTH });
    const text = await res.body.text();
    t.equal(res.statusCode, 500);
    t.match(res.headers['content-type'], /^application\/json/);
    const body = JSON.parse(text) as Record<string, unknown>;
    t.strictSame(Object.keys(body).sort(), ['code', 'message', 'success'], 'the flat envelope');
    t.equal(body.success, false);
    t.equal(body.code, 'EXPORT_FAILED');
    t.notMatch(
      text,
      /documents|relation|SELECT|DECLARE|FETCH|cursor|postgres|\bat \S+:\d+|\.ts|\.js|42P01/i,
      'no SQL, no stack, no driver detail',
    );
  },
);

/**
 * A server whose `documents` is a view over the real table, with content_str computed by `expr`
 * (SQL over the row, e.g. to fail or sleep at one row): planning and DECLARE succeed, the FETCH
 * that reaches the chosen row fails or waits. 40 documents of 4000 characters (≈ 160 KB, past the
 * first 64 K-character chunk), EXPORT_BATCH_SIZE 5.
 */
async function viewServer(t: { teardown(fn: () => unknown): void }) {
  const server = await startServer(t, { EXPORT_BATCH_SIZE: '5', STALL_TIMEOUT_MS: '20000' });
  const docs = Array.from({ length: 40 }, (_, i) => ({
    id: `d${String(i).padStart(2, '0')}`,
    slug: `s${i}`,
    name: `D${i}`,
    type: 'document',
    orderKey: `a${String(i).padStart(2, '0')}`,
    status: 1,
    contentStr: 'x'.repeat(4000),
  }));
  await seed(server.db.sql, simpleSeed(docs));
  await server.db.sql.unsafe('ALTER TABLE documents RENAME TO documents_real');
  // Rows are computed as the cursor reaches them (index scan, no sort), for the export pool's new connections.
  await server.db.sql.unsafe(`ALTER DATABASE ${server.db.name} SET enable_seqscan = off`);
  await server.db.sql.unsafe(`ALTER DATABASE ${server.db.name} SET enable_sort = off`);
  const setContent = async (expr: string) => {
    await server.db.sql.unsafe(`
      CREATE OR REPLACE VIEW documents AS
      SELECT id, book_id, slug, name, type, parent_id, order_key, status, description, emoji_info, cover_url,
             cover_position, tags, theme_id, background_theme_id, body_font_size, created_at, updated_at,
             ${expr} AS content_str, content_html, export_head, export_mid, NULL::text AS export_str, export_html
      FROM documents_real d`);
  };
  return { server, setContent, ids: docs.map((d) => d.id) };
}

t.test(
  'an error in the first batch is a 500 EXPORT_FAILED envelope; in a later batch it aborts (D6.2, D6.3)',
  async (t) => {
    const { server, setContent } = await viewServer(t);
    // The size cursor (decisions.md D8.4) computes every row's content_str first, so the view fails
    // the second time a transaction computes the row: when the export cursor itself reaches it.
    // (Declared STABLE so the view is flattened and rows are computed as the cursors reach them.)
    await server.db.sql.unsafe(`
    CREATE FUNCTION fail_second(id text, target text, v text) RETURNS text STABLE LANGUAGE plpgsql AS $$
    BEGIN
      IF id = target THEN
        IF current_setting('kbx.reached', true) = target THEN RETURN (1 / (length(id) - length(id)))::text; END IF;
        PERFORM set_config('kbx.reached', target, true);
      END IF;
      RETURN v;
    END $$`);
    const failAt = (id: string) => setContent(`fail_second(id, '${id}', content_str)`);

    await failAt('d02'); // first batch (rows d00–d04)
    const first = await request(exportUrl(server), { headers: AUTH });
    const text = await first.body.text();
    t.equal(first.statusCode, 500, 'first-batch failure: nothing was sent yet');
    const env = JSON.parse(text) as Record<string, unknown>;
    t.equal(env.success, false);
    t.equal(env.code, 'EXPORT_FAILED');
    t.notMatch(text, /division|zero|22012|documents|SELECT|FETCH|\.ts|\.js/i, 'no internal detail');
    await waitReleased(server.db, 5000);

    await failAt('d35');
    const later = await request(exportUrl(server), { headers: AUTH });
    t.equal(later.statusCode, 200, 'later failure: the status was already sent');
    const { text: partial, error } = await drain(later.body, []);
    t.ok(error, 'the body errored');
    t.throws(() => JSON.parse(partial), 'truncated body does not parse');
    t.notOk(partial.endsWith('}}'), 'no closing');
    t.notMatch(partial, /division|22012/i, 'the cause did not reach the client');
    await waitReleased(server.db, 5000);
  },
);

t.test('backend killed while a FETCH is in flight: the response aborts and the server lives on (D6.3)', async (t) => {
  const { server, setContent, ids } = await viewServer(t);
  // Row d20 takes 30 s to read: the FETCH of batch d20–d24 is in flight when the backend is killed.
  // (Declared STABLE so the view is flattened and rows are computed as the cursor reaches them.)
  await server.db.sql.unsafe(`
    CREATE FUNCTION slow_at(id text, v text) RETURNS text STABLE LANGUAGE plpgsql AS
    $$ BEGIN IF id = 'd20' THEN PERFORM pg_sleep(30); END IF; RETURN v; END $$`);
  await setContent('slow_at(id, content_str)');
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200);
  const chunks = [await readOneChunk(res.body)];
  let fetching: { pid: number }[] = [];
  for (let i = 0; i < 200 && fetching.length === 0; i++) {
    fetching = await server.db.sql<{ pid: number }[]>`
      SELECT pid FROM pg_stat_activity
      WHERE application_name = ${EXPORT_APP} AND datname = ${server.db.name} AND state = 'active' AND query LIKE 'FETCH%'`;
    if (fetching.length === 0) await sleep(25);
  }
  t.equal(fetching.length, 1, 'the FETCH is in flight');
  await server.db.sql`SELECT pg_terminate_backend(${fetching[0]!.pid})`;
  const start = Date.now();
  const { text, error } = await drain(res.body, chunks);
  t.ok(error, 'the body errored');
  t.ok(Date.now() - start < 5000, `aborted ${Date.now() - start} ms after the kill`);
  t.throws(() => JSON.parse(text));
  t.notOk(text.endsWith('}}'));

  await server.db.sql.unsafe(
    `CREATE OR REPLACE FUNCTION slow_at(id text, v text) RETURNS text STABLE LANGUAGE sql AS 'SELECT v'`,
  );
  const next = await request(exportUrl(server), { headers: AUTH });
  t.equal(next.statusCode, 200, 'the server is alive and its pool reconnects');
  t.strictSame(idsOf(await next.body.text()), ids);
});

t.test('a client abort releases the export connection at once; the next export is served (D6.4)', async (t) => {
  const server = await startServer(
    t,
    { EXPORT_BATCH_SIZE: '20', EXPORT_CONCURRENCY: '1', STALL_TIMEOUT_MS: '60000' },
    shared,
  );
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200);
  await readOneChunk(res.body);
  await waitInTransaction(shared);
  t.ok(
    (await busyExportBackends(shared)).length >= 1,
    'the export holds its transaction while the client is connected',
  );
  res.body.destroy();
  const ms = await waitReleased(shared, 5000);
  t.ok(ms <= 5000, `transaction ended ${ms} ms after the abort (long before the 60 s stall timeout)`);

  // With EXPORT_CONCURRENCY=1 the next export needs that very connection back.
  const next = await request(exportUrl(server), { headers: AUTH });
  t.equal(next.statusCode, 200);
  t.strictSame(idsOf(await next.body.text()), big.ids, 'the next export is complete');
});

t.test('a stalled reader is dropped and its transaction ends within a bounded time (D6.4)', async (t) => {
  const server = await startServer(t, { EXPORT_BATCH_SIZE: '50', STALL_TIMEOUT_MS: '500' }, shared);
  const started = Date.now();
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200);
  const chunks = [await readOneChunk(res.body)];
  // Read nothing more: socket buffers fill, the server waits for 'drain', the stall timer fires.
  await waitInTransaction(shared);
  const ms = await waitReleased(shared, 5000);
  t.ok(Date.now() - started < 6000, `transaction ended ${ms} ms after the first chunk`);
  // The server closed the connection: what is buffered can still be read, then the body errors.
  const { text, error } = await drain(res.body, chunks);
  t.ok(error, `the body errored: ${(error as { code?: string })?.code ?? String(error)}`);
  t.throws(() => JSON.parse(text), 'the truncated body does not parse');
  t.notOk(text.endsWith('}}'));

  const next = await request(exportUrl(server), { headers: AUTH });
  t.equal(next.statusCode, 200);
  const whole = await next.body.text();
  t.ok(
    Buffer.byteLength(text) < Buffer.byteLength(whole),
    `the body is truncated (${Buffer.byteLength(text)} of ${Buffer.byteLength(whole)} bytes)`,
  );
  t.strictSame(idsOf(whole), big.ids, 'the server still serves the next export');
});

t.test('the export is one snapshot taken at its start (D6.1)', async (t) => {
  const server = await startServer(t, { EXPORT_BATCH_SIZE: '10', STALL_TIMEOUT_MS: '20000' });
  const data = await seedGenerated(server.db.sql, 1200);
  const sql = server.db.sql;
  const res = await request(exportUrl(server), { headers: AUTH });
  t.equal(res.statusCode, 200);
  const chunks = [await readOneChunk(res.body)];
  await waitInTransaction(server.db);

  const last = data.ids[data.ids.length - 1]!;
  const nearEnd = data.ids[data.ids.length - 10]!;
  const deactivated = data.ids[data.ids.length - 20]!;
  const [before] = await sql<{ name: string }[]>`SELECT name FROM documents WHERE id = ${nearEnd}`;
  await sql.begin(async (tx) => {
    await tx`INSERT INTO documents (id, book_id, slug, name, type, order_key, status)
             VALUES ('new-first', ${BOOK}, 'nf', 'New first', 'document', '0', 1),
                    ('new-last', ${BOOK}, 'nl', 'New last', 'document', 'zzzz', 1)`;
    await tx`DELETE FROM documents WHERE id = ${last}`;
    await tx`UPDATE documents SET name = 'changed during export' WHERE id = ${nearEnd}`;
    await tx`UPDATE documents SET status = 0 WHERE id = ${deactivated}`;
  });
  t.ok((await busyExportBackends(server.db)).length >= 1, 'the changes committed while the export was still running');

  const { text, error } = await drain(res.body, chunks, 1);
  t.error(error, 'the export completed');
  const body = JSON.parse(text) as { documents: { id: string; name: string }[]; meta: { count: number } };
  t.equal(body.meta.count, data.ids.length, 'count as at the start');
  t.strictSame(
    body.documents.map((d) => d.id),
    data.ids,
    'exactly the ids as at the start, in order',
  );
  t.equal(body.documents.find((d) => d.id === nearEnd)?.name, before!.name, 'the update is not seen');

  // The next export sees the changes.
  const after = await request(exportUrl(server), { headers: AUTH });
  const ids = idsOf(await after.body.text());
  t.equal(ids[0], 'new-first');
  t.equal(ids[ids.length - 1], 'new-last');
  t.notOk(ids.includes(last) || ids.includes(deactivated), 'deleted and deactivated documents are gone');
  t.equal(ids.length, data.ids.length - 2 + 2);
});

t.test('EXPORT_CONCURRENCY=1: a second export waits and completes; key lookups are not starved', async (t) => {
  const server = await startServer(
    t,
    { EXPORT_BATCH_SIZE: '20', EXPORT_CONCURRENCY: '1', STALL_TIMEOUT_MS: '20000' },
    shared,
  );
  // The first export holds the only export connection: its client reads one chunk, then pauses.
  const first = await request(exportUrl(server), { headers: AUTH });
  t.equal(first.statusCode, 200);
  const firstChunks = [await readOneChunk(first.body)];
  await waitInTransaction(shared);

  let secondHeaders = false;
  const second = request(exportUrl(server), { headers: AUTH }).then((r) => {
    secondHeaders = true;
    return r;
  });
  await sleep(300);
  t.notOk(secondHeaders, 'the second export waits for the export connection');

  // Key verification uses the other pool: a bad key is answered at once.
  const t0 = Date.now();
  const bad = await request(exportUrl(server), { headers: { authorization: 'Bearer kbx_nope' } });
  t.equal(bad.statusCode, 401);
  t.equal(((await bad.body.json()) as { code: string }).code, 'INVALID_API_KEY');
  t.ok(Date.now() - t0 < 3000, `401 answered in ${Date.now() - t0} ms while the export pool is busy`);
  // An unknown slug must not wait for the export pool either (404 is a lookup, like 401).
  await t.test('404 BOOK_NOT_FOUND is answered while the export pool is busy', async (t) => {
    const t1 = Date.now();
    const none = await request(exportUrl(server, 'no-such-book'), { headers: AUTH, headersTimeout: 5000 }).then(
      async (r) => ({ status: r.statusCode, body: (await r.body.json()) as { code: string } }),
      (err: unknown) => ({ status: 0, body: { code: String((err as Error).message) } }),
    );
    const ms = Date.now() - t1;
    t.equal(none.status, 404, `unknown slug answered (${none.status}, ${none.body.code}) in ${ms} ms`);
    t.equal(none.body.code, 'BOOK_NOT_FOUND');
    t.ok(ms < 3000, '404 not starved by the busy export pool');
  });

  // Let the first export finish; then the second runs.
  const a = await drain(first.body, firstChunks);
  t.error(a.error);
  t.strictSame(idsOf(a.text), big.ids, 'first export complete');
  const r2 = await second;
  t.equal(r2.statusCode, 200);
  t.strictSame(idsOf(await r2.body.text()), big.ids, 'second export complete');
});
