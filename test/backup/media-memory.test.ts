/**
 * A 1 GiB media file, streamed by a test server from a generator (never held anywhere), saved by
 * `kb-export backup --media-dir` run as the shipped executable, whose peak RSS (VmHWM, read from
 * /proc) stays under a bound that has nothing to do with the file's size; the file on disk has the
 * size and SHA-256 the server computed as it sent it, and so does the manifest.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { runCli } from '../../bench/lib/cli-process.js';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { startStub } from '../helpers/export-stub.js';

const MB = 1024 * 1024;
const SIZE = 1024 * MB;
/** Peak RSS allowed: a small backup peaks near 100 MB on the test machine; the file is 1,024 MB. */
const BOUND = 160 * MB;

let served: { sha256: string; bytes: number } | null = null;
const media = await startStub(t, (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': SIZE });
  // 64 KiB blocks, each different (its index in the first bytes), written as the socket drains.
  const hash = createHash('sha256');
  const block = Buffer.alloc(64 * 1024, 'kb-export media memory test ');
  let sent = 0;
  const pump = () => {
    while (sent < SIZE) {
      const b = Buffer.from(block);
      b.writeUInt32BE(sent / block.length, 0);
      hash.update(b);
      sent += b.length;
      if (!res.write(b)) return void res.once('drain', pump);
    }
    served = { sha256: hash.digest('hex'), bytes: sent };
    res.end();
  };
  pump();
});

const db = await createTestDatabase(t);
await seed(db.sql, simpleSeed([doc('d1', 'a1', { contentHtml: '<video src="videos/huge.bin"></video>' })]));
const server = await startServer(t, { MEDIA_PROXY_PREFIX: `${media.base}/m/` }, db);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-media-memory-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test(`a ${SIZE / MB} MiB media file in bounded memory`, async (t) => {
  const out = path.join(dir, 'kb.json');
  const run = await runCli(
    ['backup', '--server', server.url, '--book', 'kb', '--out', out, '--media-dir', path.join(dir, 'media')],
    { KB_EXPORT_API_KEY: 'kbx_u1' },
  );
  t.equal(run.code, 0, run.stderr);
  t.ok(served !== null, 'the server sent the whole file');
  const file = path.join(dir, 'media/videos/huge.bin');
  t.equal(statSync(file).size, SIZE);
  const manifest = JSON.parse(readFileSync(`${out}.manifest.json`, 'utf8')) as {
    media: { path: string; bytes: number; sha256: string }[];
  };
  t.same(manifest.media, [
    {
      path: 'videos/huge.bin',
      url: `${media.base}/m/videos/huge.bin`,
      bytes: SIZE,
      sha256: served!.sha256,
      contentType: 'application/octet-stream',
    },
  ]);
  t.ok(run.peakRss > 0, 'VmHWM was read');
  t.ok(
    run.peakRss < BOUND,
    `peak RSS ${(run.peakRss / MB).toFixed(1)} MB for a ${SIZE / MB} MiB file in ${run.seconds.toFixed(1)} s (bound ${BOUND / MB} MB)`,
  );
});
