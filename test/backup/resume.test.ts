/**
 * `kb-export backup` over a link cut every 100 KB (a TCP proxy between client and server) while a
 * writer changes, moves, deletes and creates documents at each cut (decisions.md D13.2): the client
 * keeps the whole documents it received, asks for the rest after the last one, and makes the parts
 * one snapshot with the delta since the first token. The file equals a full export of that snapshot
 * byte for byte, in JSON and NDJSON, plain and .gz, having moved little more than one export's bytes.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { request } from 'undici';
import { startServer } from '../helpers/app.js';
import { runBackupCli } from '../helpers/backup-cli.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const PATH = '/api/v1/open/books/kb/docs?excludeCategories=true&includeContentHtml=true';
/** Bytes on the wire where the export travels compressed (about a fifth of its JSON): several cuts per export. */
const CUT_BYTES = 20_000;

const db = await createTestDatabase(t);
// About 600 KB of JSON, some 120 KB on the wire.
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 80, paragraphs: 2 }]);
// Batches of 4 documents: the compressor is flushed every few KB, so every cut leaves whole documents behind it.
const server = await startServer(t, { EXPORT_BATCH_SIZE: '4' }, db);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-resume-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const leftovers = () => readdirSync(dir).filter((f) => f.endsWith('.tmp') || f.includes('.parts.'));

/**
 * A proxy to the server at 256 KB/s. The rest of a cut .gz export comes compressed and is decoded
 * into the spool, and what the decoder holds when the link is cut is lost: at loopback speed that
 * can be all an attempt received. Slowed, every attempt brings whole documents.
 */
async function linkOfCuts(t: Parameters<typeof startTcpProxy>[0]) {
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  proxy.throttle(256 * 1024);
  return proxy;
}

async function direct(accept: string): Promise<Buffer> {
  const res = await request(`${server.url}${PATH}`, { headers: { authorization: 'Bearer kbx_u1', accept } });
  return Buffer.from(await res.body.arrayBuffer());
}

/**
 * Each time the proxy cuts (the client then waits a second before it resumes), one round of writes:
 * a rename, a document moved to the other end of the order, one deleted, one created. Stops after
 * `rounds` and disarms the cuts, so the delta the client asks for last sees every write.
 */
function writeAtCuts(
  proxy: Awaited<ReturnType<typeof startTcpProxy>>,
  rounds: number,
  tag: string,
): { done: Promise<number> } {
  const sql = db.sql;
  const done = (async () => {
    let seen = proxy.stats().cuts;
    let round = 0;
    const deadline = Date.now() + 120_000;
    while (round < rounds && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
      if (proxy.stats().cuts === seen) continue;
      seen = proxy.stats().cuts;
      round++;
      if (round === rounds) proxy.cutEvery(null);
      const [first, last] = await sql<{ id: string }[]>`
        (SELECT id FROM documents WHERE book_id = 'b-kb' AND status = 1 ORDER BY order_key, id LIMIT 1)
        UNION ALL (SELECT id FROM documents WHERE book_id = 'b-kb' AND status = 1 ORDER BY order_key DESC, id DESC LIMIT 1)`;
      await sql`UPDATE documents SET name = ${`renamed ${tag} ${round}`} WHERE id = ${last!.id}`;
      await sql`UPDATE documents SET order_key = ${`~${tag}${round}`} WHERE id = ${first!.id}`;
      await sql`DELETE FROM documents WHERE id = (SELECT id FROM documents WHERE book_id = 'b-kb' AND status = 1 ORDER BY order_key, id OFFSET 3 LIMIT 1)`;
      await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
                VALUES (${`n-${tag}-${round}`}, 'b-kb', ${`n-${tag}-${round}`}, 'New', 'document', ${`0${tag}${round}`}, 1, '<p><img src="new.png"></p>')`;
    }
    return round;
  })();
  return { done };
}

// A plain file travels as the identity body (five times the bytes: cut less often), or compressed with --compressed.
for (const [name, accept, decode, cutBytes, more] of [
  ['cut.json', 'application/json', (b: Buffer) => b, 5 * CUT_BYTES, []],
  ['cut.ndjson', 'application/x-ndjson', (b: Buffer) => b, CUT_BYTES, ['--compressed']],
  ['cut.json.gz', 'application/json', (b: Buffer) => zlib.gunzipSync(b), CUT_BYTES, []],
  ['cut.ndjson.gz', 'application/x-ndjson', (b: Buffer) => zlib.gunzipSync(b), CUT_BYTES, []],
] as const) {
  t.test(
    `${name}${more.length ? ` ${more.join(' ')}` : ''}: cut every ${cutBytes} bytes while a writer changes documents, the backup is one snapshot's export`,
    async (t) => {
      const proxy = await linkOfCuts(t);
      const file = path.join(dir, name);
      const format = accept === 'application/json' ? 'json' : 'ndjson';
      const args = [
        ...['--server', `http://127.0.0.1:${proxy.port}`, '--book', 'kb', '--out', file, '--format', format],
        ...more,
      ];
      // What one uncut backup moves over the same link, for the comparison below.
      const whole = proxy.stats().bytesToClient;
      t.equal((await runBackupCli(args)).code, 0);
      const size = proxy.stats().bytesToClient - whole;
      proxy.cutEvery(cutBytes);
      const writer = writeAtCuts(proxy, 3, name.replace(/\W/g, ''));
      const before = proxy.stats().bytesToClient;
      const run = await runBackupCli([...args, '--retries', '3']);
      proxy.cutEvery(null);
      t.equal(run.code, 0, run.stderr);
      t.equal(await writer.done, 3, 'three rounds of writes, each at a cut');
      t.match(run.stderr, /cut after \d+ documents .*resuming after document/, 'the progress says it resumed');
      t.match(
        run.stderr,
        /resumed after \d+ cut\(s\), made one snapshot with a delta of \d+ changed or new and \d+ removed/,
      );
      const want = await direct(accept);
      t.ok(decode(readFileSync(file)).equals(want), 'byte for byte the export of the snapshot after the last write');
      const moved = proxy.stats().bytesToClient - before;
      t.ok(
        moved < 1.5 * size,
        `${moved} bytes moved, against ${size} for an uncut backup (with ${run.stderr.match(/cut after/g)?.length ?? 0} cuts)`,
      );
      t.same(leftovers(), [], 'no spool or temporary file left');
    },
  );
}

t.test(
  'a cut before any whole document starts again; cuts that each move the export on never run out of retries',
  async (t) => {
    const proxy = await linkOfCuts(t);
    const file = path.join(dir, 'early.json');
    proxy.cutAfter(200);
    const early = await runBackupCli([
      '--server',
      `http://127.0.0.1:${proxy.port}`,
      '--book',
      'kb',
      '--out',
      file,
      '--retries',
      '1',
    ]);
    t.equal(early.code, 0, early.stderr);
    t.match(early.stderr, /attempt 1 failed/, 'nothing to keep: a plain retry');
    t.ok(readFileSync(file).equals(await direct('application/json')));

    // A quarter of the identity body: several cuts, and every attempt brings whole documents.
    proxy.cutEvery(150_000);
    const many = await runBackupCli([
      '--server',
      `http://127.0.0.1:${proxy.port}`,
      '--book',
      'kb',
      '--out',
      file,
      '--retries',
      '1',
    ]);
    proxy.cutEvery(null);
    t.equal(many.code, 0, `--retries 1, yet it finished: each cut moved the export forward\n${many.stderr}`);
    t.ok(
      (many.stderr.match(/cut after/g)?.length ?? 0) >= 2,
      `after ${many.stderr.match(/cut after/g)?.length ?? 0} cuts`,
    );
    t.ok(readFileSync(file).equals(await direct('application/json')));
    t.same(leftovers(), []);
  },
);

t.test(
  "with --incremental a resumed backup keeps the delta's token, and the next run merges from it; with --if-changed it keeps no ETag",
  async (t) => {
    const proxy = await linkOfCuts(t);
    const base = ['--server', `http://127.0.0.1:${proxy.port}`, '--book', 'kb'];
    const inc = path.join(dir, 'inc.ndjson');
    proxy.cutEvery(150_000);
    const first = await runBackupCli([...base, '--out', inc, '--format', 'ndjson', '--incremental', '--retries', '2']);
    proxy.cutEvery(null);
    t.equal(first.code, 0, first.stderr);
    t.match(first.stderr, /resumed after \d+ cut/);
    t.ok(readFileSync(inc).equals(await direct('application/x-ndjson')));
    await db.sql`UPDATE documents SET name = 'after the resumed backup' WHERE id = (SELECT id FROM documents WHERE book_id = 'b-kb' AND status = 1 ORDER BY order_key LIMIT 1)`;
    const next = await runBackupCli([...base, '--out', inc, '--format', 'ndjson', '--incremental']);
    t.equal(next.code, 0, next.stderr);
    t.match(
      next.stderr,
      /merged .*from a delta of 1 changed or new and 0 removed/,
      'the token the resumed backup kept answers the next delta',
    );
    t.ok(readFileSync(inc).equals(await direct('application/x-ndjson')));

    const etagged = path.join(dir, 'etagged.json');
    proxy.cutEvery(150_000);
    const cut = await runBackupCli([...base, '--out', etagged, '--if-changed', '--retries', '2']);
    proxy.cutEvery(null);
    t.equal(cut.code, 0, cut.stderr);
    t.match(cut.stderr, /resumed after \d+ cut/);
    const again = await runBackupCli([...base, '--out', etagged, '--if-changed']);
    t.match(
      again.stderr,
      /wrote .*etagged\.json/,
      'no ETag was kept for a resumed file: the next run downloads it whole',
    );
    t.ok(readFileSync(etagged).equals(await direct('application/json')));
    t.same(leftovers(), []);
  },
);
