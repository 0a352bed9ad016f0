/**
 * `kb-export backup` as a child process over real sockets against a real server and PostgreSQL:
 * the file equals a direct GET byte for byte (JSON, NDJSON, .gz), .gz and .br hold the server's
 * compressed bytes, --if-changed costs one 304 and leaves the file alone while it matches its
 * record and downloads again when it does not (removed, changed, an old record), refusals that retrying cannot cure exit 3 after one request, Retry-After
 * is waited for, and a body cut mid-stream (a TCP proxy between client and server) never replaces
 * the old file nor leaves a temporary one; a retry after the cut writes the whole export.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import http from 'node:http';
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
import { RawExportSplitter } from '../../src/backup/raw-split.js';

const PATH = '/api/v1/open/books/kb/docs?excludeCategories=true&includeContentHtml=true';
const backup = runBackupCli;

async function direct(base: string, accept = 'application/json'): Promise<Buffer> {
  const res = await request(`${base}${PATH}`, { headers: { authorization: 'Bearer kbx_u1', accept } });
  return Buffer.from(await res.body.arrayBuffer());
}

const db = await createTestDatabase(t);
// Some 600 KB of JSON: several batches of 16 and well past the cut at 100 KB; size is not the point.
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 80, paragraphs: 2 }]);
const server = await startServer(t, { EXPORT_BATCH_SIZE: '16' }, db);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-backup-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const out = (name: string) => path.join(dir, name);
const leftovers = () => readdirSync(dir).filter((f) => f.endsWith('.tmp'));
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

t.test('a backup equals a direct GET byte for byte: JSON, .gz, NDJSON, standard output', async (t) => {
  const want = await direct(server.url);
  const json = await backup(['--server', server.url, '--book', 'kb', '--out', out('a.json')]);
  t.equal(json.code, 0, json.stderr);
  t.ok(readFileSync(out('a.json')).equals(want), 'the file is the body the server sends');
  t.match(json.stderr, /wrote .*a\.json: \d+ documents, \d+ bytes in [\d.]+ s, ETag (W\/)?"kbx[0-9.]+-/);
  const gz = await backup(['--server', server.url, '--book', 'kb', '--out', out('a.json.gz'), '--quiet']);
  t.equal(gz.code, 0, gz.stderr);
  t.equal(gz.stderr, '', '--quiet prints nothing');
  t.ok(zlib.gunzipSync(readFileSync(out('a.json.gz'))).equals(want), '.gz decompresses to the same bytes');
  const nd = await backup(['--server', server.url, '--book', 'kb', '--out', out('a.ndjson'), '--format', 'ndjson']);
  t.equal(nd.code, 0, nd.stderr);
  t.ok(
    readFileSync(out('a.ndjson')).equals(await direct(server.url, 'application/x-ndjson')),
    'NDJSON lines as the server sends them',
  );
  const stdout = await backup(['--server', server.url, '--book', 'kb', '--out', '-', '--quiet']);
  t.equal(stdout.code, 0);
  t.ok(stdout.stdout.equals(want), '- writes the body to standard output');
  t.same(leftovers(), [], 'no temporary file left');
});

t.test('--if-changed: the second run is one 304 that leaves the file alone; a change replaces it', async (t) => {
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  const base = `http://127.0.0.1:${proxy.port}`;
  const file = out('b.json');
  const first = await backup(['--server', base, '--book', 'kb', '--out', file, '--if-changed']);
  t.equal(first.code, 0, first.stderr);
  const record = JSON.parse(readFileSync(`${file}.etag`, 'utf8')) as { etag: string; size: number; sha256: string };
  t.match(record.etag, /^(W\/)?"kbx[0-9.]+-.+"$/, 'the ETag is kept beside the file');
  t.same(
    record,
    { etag: record.etag, size: statSync(file).size, sha256: sha256(readFileSync(file)) },
    'with its size and digest',
  );
  const before = { bytes: readFileSync(file), mtime: statSync(file).mtimeMs };
  const stats = proxy.stats();
  const second = await backup(['--server', base, '--book', 'kb', '--out', file, '--if-changed']);
  t.equal(second.code, 0);
  t.match(second.stderr, /unchanged/);
  t.equal(proxy.stats().accepted - stats.accepted, 1, 'one connection');
  t.ok(proxy.stats().bytesToClient - stats.bytesToClient < 2000, 'and no body: a 304');
  t.ok(readFileSync(file).equals(before.bytes), 'the same bytes');
  t.equal(statSync(file).mtimeMs, before.mtime, 'the same mtime');

  await db.sql`UPDATE documents SET name = 'renamed by the test' WHERE id = (SELECT min(id) FROM documents WHERE status = 1 AND type <> 'category')`;
  const third = await backup(['--server', base, '--book', 'kb', '--out', file, '--if-changed']);
  t.equal(third.code, 0, third.stderr);
  t.ok(readFileSync(file).includes('renamed by the test'), 'replaced after a document changed');
  t.ok(readFileSync(file).equals(await direct(server.url)));
});

t.test(
  '--if-changed downloads again when PATH is missing or no longer matches its record, or the record is an old plain ETag',
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
    const base = `http://127.0.0.1:${proxy.port}`;
    const want = await direct(server.url);
    for (const name of ['f.json', 'f.json.gz']) {
      const file = out(name);
      const run = () => backup(['--server', base, '--book', 'kb', '--out', file, '--if-changed']);
      t.equal((await run()).code, 0);
      const record = readFileSync(`${file}.etag`, 'utf8');
      t.equal(JSON.parse(record).sha256, sha256(readFileSync(file)), `${name}: the digest is of the bytes on disk`);
      const downloads = async (why: string, expect: RegExp) => {
        const before = proxy.stats().bytesToClient;
        const r = await run();
        t.equal(r.code, 0, `${name}, ${why}: ${r.stderr}`);
        t.match(r.stderr, expect, `${name}, ${why}: says why it downloads`);
        t.match(r.stderr, /\nwrote /, `${name}, ${why}: written`);
        t.ok(proxy.stats().bytesToClient - before > 20_000, `${name}, ${why}: a body came, not a 304`);
        const now = readFileSync(file);
        t.ok((name.endsWith('.gz') ? zlib.gunzipSync(now) : now).equals(want), `${name}, ${why}: the whole export`);
        t.equal(
          JSON.parse(readFileSync(`${file}.etag`, 'utf8')).sha256,
          sha256(now),
          `${name}, ${why}: a record of the new bytes`,
        );
      };
      rmSync(file);
      await downloads('removed', /is missing: downloading/);
      const changed = Buffer.from(readFileSync(file));
      changed[changed.length >> 1]! ^= 0xff;
      writeFileSync(file, changed);
      await downloads('one byte changed', /does not match .*\.etag .*: downloading/);
      truncateSync(file, 100);
      await downloads('truncated', /does not match .*\.etag .*: downloading/);
      writeFileSync(`${file}.etag`, `${JSON.parse(record).etag}\n`);
      await downloads('an old plain ETag record', /holds no size and digest .*: downloading/);
      const before = proxy.stats().bytesToClient;
      const current = await run();
      t.match(current.stderr, /unchanged/, `${name}: then unchanged`);
      t.ok(proxy.stats().bytesToClient - before < 2000, `${name}: a 304`);
    }
    t.same(leftovers(), []);
  },
);

t.test(
  ".gz and .br hold the server's compressed bytes: one compression, the bytes on the wire are the file",
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
    const base = `http://127.0.0.1:${proxy.port}`;
    const want = await direct(server.url);
    for (const [name, decode, encoding] of [
      ['g.json.gz', zlib.gunzipSync, 'gzip'],
      ['g.json.br', zlib.brotliDecompressSync, 'br'],
    ] as const) {
      const before = proxy.stats().bytesToClient;
      const r = await backup(['--server', base, '--book', 'kb', '--out', out(name)]);
      t.equal(r.code, 0, r.stderr);
      const file = readFileSync(out(name));
      t.ok(decode(file).equals(want), `${name}: decompresses to the export`);
      t.match(
        r.stderr,
        new RegExp(
          `wrote .*${name}: \\d+ documents, ${want.length} bytes \\(${file.length} on disk, ${encoding} as the server sent it\\)`,
        ),
      );
      // Headers and chunk sizes aside, what came over the wire is what was written.
      const wire = proxy.stats().bytesToClient - before;
      t.ok(
        wire >= file.length && wire - file.length < 4000,
        `${name}: ${wire} bytes received for a file of ${file.length}`,
      );
    }
    t.same(leftovers(), []);
  },
);

t.test('401 and 404: exit 3 after one request, the server code shown; usage errors exit 2', async (t) => {
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  const base = `http://127.0.0.1:${proxy.port}`;
  const badKey = await backup(['--server', base, '--book', 'kb', '--out', out('c.json')], {
    KB_EXPORT_API_KEY: 'kbx_nobody',
  });
  t.equal(badKey.code, 3);
  t.match(badKey.stderr, /401 INVALID_API_KEY/);
  const missing = await backup(['--server', base, '--book', 'nope', '--out', out('c.json')]);
  t.equal(missing.code, 3);
  t.match(missing.stderr, /404 BOOK_NOT_FOUND/);
  t.equal(proxy.stats().accepted, 2, 'one request each, no retry');
  t.throws(() => statSync(out('c.json')), 'nothing written');
  const noKey = await backup(['--server', base, '--book', 'kb', '--out', out('c.json')], { KB_EXPORT_API_KEY: '' });
  t.equal(noKey.code, 2);
  t.match(noKey.stderr, /KB_EXPORT_API_KEY/);
  t.equal((await backup(['--server', base, '--book', 'kb'])).code, 2, 'no --out');
  t.equal((await backup(['--server', base, '--book', 'kb', '--out', out('c.json'), '--retries', 'many'])).code, 2);
  const keyFile = out('key');
  writeFileSync(keyFile, 'kbx_u1\n');
  t.equal(
    (
      await backup(['--server', base, '--book', 'kb', '--out', out('c.json'), '--key-file', keyFile], {
        KB_EXPORT_API_KEY: '',
      })
    ).code,
    0,
    '--key-file',
  );
});

t.test('429 with Retry-After, then 200: the client waits, then writes the export', async (t) => {
  const body = await direct(server.url);
  let requests = 0;
  const stub = http.createServer((_req, res) => {
    if (requests++ === 0) {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' });
      res.end(JSON.stringify({ success: false, code: 'RATE_LIMITED', message: 'Too many requests, retry later' }));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', etag: '"stub"' });
    res.end(body);
  });
  await new Promise<void>((resolve) => stub.listen(0, '127.0.0.1', resolve));
  t.teardown(() => stub.close());
  const run = await backup([
    '--server',
    `http://127.0.0.1:${(stub.address() as { port: number }).port}`,
    '--book',
    'kb',
    '--out',
    out('d.json'),
  ]);
  t.equal(run.code, 0, run.stderr);
  t.equal(requests, 2);
  t.ok(run.ms >= 1000, `waited for Retry-After (${run.ms} ms)`);
  t.match(run.stderr, /429 RATE_LIMITED.*retrying in/);
  t.ok(readFileSync(out('d.json')).equals(body));
});

t.test(
  'a body cut mid-stream: exit 1 with the old file intact and no temporary file; a retry writes the whole export',
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
    const base = `http://127.0.0.1:${proxy.port}`;
    const file = out('e.json');
    writeFileSync(file, 'the old backup');
    proxy.cutAfter(100_000);
    const cut = await backup(['--server', base, '--book', 'kb', '--out', file, '--retries', '0']);
    t.equal(cut.code, 1, cut.stderr);
    t.match(cut.stderr, /failed after 1 attempt/);
    t.equal(readFileSync(file, 'utf8'), 'the old backup', 'the old file is intact');
    t.same(leftovers(), [], 'no temporary file left');

    proxy.cutAfter(100_000);
    const retried = await backup(['--server', base, '--book', 'kb', '--out', file, '--retries', '2']);
    t.equal(retried.code, 0, retried.stderr);
    t.match(retried.stderr, /cut after \d+ documents .*resuming after document/);
    t.ok(readFileSync(file).equals(await direct(server.url)), 'the whole export after the retry');
    t.same(leftovers(), []);
  },
);

t.test(
  'a cut at full speed: the resumed backup keeps every whole document that reached the client, not just what was written',
  async (t) => {
    const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
    const base = `http://127.0.0.1:${proxy.port}`;
    const want = await direct(server.url);
    /** Whole documents within the body's first `bytes` bytes. */
    const wholeWithin = (bytes: number) => {
      let n = 0;
      const splitter = new RawExportSplitter('json', { book() {}, document: () => n++, removed() {} });
      splitter.write(want.subarray(0, Math.max(0, bytes)));
      return n;
    };
    for (const cutAt of [150_000, 300_000]) {
      proxy.cutAfter(cutAt);
      const file = out(`full-speed-${cutAt}.json`);
      const r = await backup(['--server', base, '--book', 'kb', '--out', file, '--retries', '1']);
      proxy.cutAfter(null);
      t.equal(r.code, 0, r.stderr);
      t.ok(readFileSync(file).equals(want), `cut at ${cutAt}: the whole export`);
      const kept = Number(/cut after (\d+) documents/.exec(r.stderr)?.[1]);
      // The proxy counts the response's head and chunk framing too: a few KB, less than a document.
      const lowest = wholeWithin(cutAt - 4096);
      t.ok(
        kept >= lowest && kept <= wholeWithin(cutAt),
        `cut at ${cutAt}: ${kept} documents kept, ${lowest} or more reached the client`,
      );
    }

    // Cut every 150 KB, the resumed requests too: each cut costs the document it split (the first
    // one not kept) and some framing, not the documents that had reached the client whole.
    const sizes: number[] = [];
    const splitter = new RawExportSplitter('json', {
      book() {},
      document: (raw) => sizes.push(raw.length),
      removed() {},
    });
    splitter.write(want);
    const before = proxy.stats();
    proxy.cutEvery(150_000);
    const file = out('cut-every.json');
    const r = await backup(['--server', base, '--book', 'kb', '--out', file, '--retries', '8']);
    proxy.cutEvery(null);
    t.equal(r.code, 0, r.stderr);
    t.ok(readFileSync(file).equals(want), 'cut every 150 KB: the whole export');
    const kept = [...r.stderr.matchAll(/cut after (\d+) documents/g)].map((m) => Number(m[1]));
    const cuts = proxy.stats().cuts - before.cuts;
    t.ok(cuts >= 3 && kept.length === cuts, `${cuts} cuts, ${kept.length} resumed`);
    const split = kept.reduce((sum, n) => sum + sizes[n]!, 0);
    const moved = proxy.stats().bytesToClient - before.bytesToClient;
    t.ok(
      moved <= want.length + split + (cuts + 1) * 4096,
      `${moved} bytes moved for an export of ${want.length}, ${split} bytes of documents split by ${cuts} cuts`,
    );
    t.same(leftovers(), []);
  },
);

t.test('a .gz backup cut at full speed: every whole document decoded before a cut is kept', async (t) => {
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: Number(new URL(server.url).port) });
  const base = `http://127.0.0.1:${proxy.port}`;
  const want = await direct(server.url);
  // Kept as the server's bytes in a .gz (decoded beside, to verify); the rest of a cut export comes
  // compressed too, and is decoded into the spool. Each attempt is cut, the resumed ones included.
  const sizes: number[] = [];
  new RawExportSplitter('json', { book() {}, document: (raw) => sizes.push(raw.length), removed() {} }).write(want);
  const head = want.indexOf('"documents":[') + '"documents":['.length;
  /** Whole documents in the first `bytes` of a body that starts after the first `kept` documents. */
  const wholeAfter = (kept: number, bytes: number) => {
    let at = head;
    let n = 0;
    for (let i = kept; i < sizes.length && at + sizes[i]! <= bytes; i++, n++) at += sizes[i]! + 1;
    return n;
  };
  // Cut within one batch's compressed bytes too: the rest, decoded here, must come in an encoding
  // that decodes as it arrives (not zstd, whose block is a whole batch).
  for (const cut of [25_000, 40_000]) {
    const name = `cz-${cut}.json.gz`;
    proxy.cutEvery(cut);
    const file = out(name);
    const r = await backup(['--server', base, '--book', 'kb', '--out', file, '--retries', '8']);
    proxy.cutEvery(null);
    t.equal(r.code, 0, r.stderr);
    t.ok(zlib.gunzipSync(readFileSync(file)).equals(want), `${name}: the whole export`);
    let kept = 0;
    for (const m of r.stderr.matchAll(/cut after (\d+) documents \(.*?after (\d+) bytes\)\)/g)) {
      const [now, decoded] = [Number(m[1]), Number(m[2])];
      const whole = wholeAfter(kept, decoded);
      t.ok(
        now - kept >= whole,
        `${name}: after ${kept}, ${now - kept} kept of the ${whole} whole in ${decoded} bytes decoded`,
      );
      kept = now;
    }
    t.ok(kept > 0, `${name}: resumed`);
  }
  t.same(leftovers(), []);
});
