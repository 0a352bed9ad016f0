/**
 * Slow readers of large documents (decisions.md D8.3): a client that accepts bytes more slowly
 * than MIN_DRAIN_BYTES_PER_S is dropped within STALL_TIMEOUT_MS and a few seconds whatever the
 * size of the document being written, not once a whole 8 MB document has gone out.
 */
import t from 'tap';
import { slowReader } from '../helpers/clients.js';
import { seed, simpleSeed, startServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';

const MB = 1024 * 1024;

t.test(
  'a reader at 110 KB/s against a floor of 2 MB/s on 8 MB documents is dropped within the stall window and a few seconds',
  async (t) => {
    const db = await createTestDatabase(t);
    await seed(db.sql, simpleSeed([]));
    // Built in PostgreSQL, so this process never holds them.
    await db.sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
    SELECT 'l' || i, 'b-u1', 'l' || i, 'Large ' || i, 'document', 'a' || i, 1, repeat('text of a large page ', ${Math.floor((8 * MB) / 21)})
    FROM generate_series(1, 6) i`);
    const server = await startServer(
      t,
      { STALL_TIMEOUT_MS: '2000', MIN_DRAIN_BYTES_PER_S: String(2 * MB), EXPORT_CACHE_BYTES: '0' },
      db,
    );
    const started = Date.now();
    const reader = slowReader(
      `${server.url}/api/v1/open/books/kb/docs`,
      { authorization: 'Bearer kbx_u1' },
      110 * 1024,
    );
    const res = await reader.done;
    const seconds = (Date.now() - started) / 1000;
    t.equal(res.status, 200, 'the export had started');
    t.notOk(res.complete, 'the body never got its terminating chunk (D6.3)');
    t.ok(seconds < 2 + 6, `dropped after ${seconds.toFixed(1)} s, ${(reader.received / MB).toFixed(1)} MB read`);
  },
);

t.test(
  'a reader just above the drain floor is never cut by a database timeout while a 60 MB document is written, workers on (D8.7)',
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase(t);
    await seed(db.sql, simpleSeed([]));
    // With rewrite workers the batch budget is 1 MB, so the snapshot's first idle allowance is 12 s
    // here. Socket buffers on loopback take up to ~10 MB at once; the rest of the 60 MB document
    // keeps the server writing for about 20 s at 2.5 MB/s.
    await db.sql.unsafe(`
    INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
    VALUES ('first', 'b-u1', 'first', 'First', 'document', 'a0', 1, '<img src="a.png">'),
           ('big', 'b-u1', 'big', 'Big', 'document', 'a1', 1, '<p>' || repeat('a page of text ', ${Math.floor((60 * MB) / 15)}) || '</p>'),
           ('after', 'b-u1', 'after', 'After', 'document', 'a2', 1, '<p>the end</p>')`);
    const floor = 2 * MB;
    const env = {
      STALL_TIMEOUT_MS: '2000',
      MIN_DRAIN_BYTES_PER_S: String(floor),
      EXPORT_CACHE_BYTES: '0',
      REWRITE_WORKERS: '1',
      REWRITE_TIMEOUT_MS: '2000',
    };
    const server = await startServer(t, env, db);
    const started = Date.now();
    // A client that keeps its rate while this process's event loop is busy: just above the floor is the point.
    const reader = slowReader(
      `${server.url}/api/v1/open/books/kb/docs`,
      { authorization: 'Bearer kbx_u1' },
      1.25 * floor,
      { keepRate: true },
    );
    const res = await reader.done;
    const seconds = (Date.now() - started) / 1000;
    t.equal(res.status, 200);
    t.ok(
      res.complete,
      `the body arrived whole after ${seconds.toFixed(0)} s (${(reader.received / MB).toFixed(1)} MB at 2.5 MB/s)`,
    );
    t.match(res.body.subarray(-40).toString(), /"meta":\{"count":3\}\}$/, 'every document, meta.count last');
  },
);
