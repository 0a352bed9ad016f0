/**
 * The demo's media (src/generate/demo-media.ts): a valid PNG for an image's path (signature,
 * chunk CRCs, pixels that inflate to 16 rows of 16 RGB pixels), the same bytes for the same path
 * and other ones for another; and served by the app as `serve --demo` builds it, so that
 * `kb-export backup --media-dir` of a generated knowledge base (the demo's documents) saves every
 * media file its documents reference, nothing missing, and verifies.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { request } from 'undici';
import { buildApp } from '../../src/app.js';
import { connect } from '../../src/db/connect.js';
import { demoPng, registerDemoMedia } from '../../src/generate/demo-media.js';
import { listenOnLoopback, testConfig } from '../helpers/app.js';
import { runBackupCli, runCli } from '../helpers/backup-cli.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';

/** The chunks of a PNG, each CRC checked. */
function chunks(png: Buffer): { type: string; data: Buffer; crcOk: boolean }[] {
  const out = [];
  for (let at = 8; at < png.length;) {
    const length = png.readUInt32BE(at);
    const type = png.subarray(at + 4, at + 8).toString('latin1');
    const data = png.subarray(at + 8, at + 8 + length);
    const crcOk = zlib.crc32(png.subarray(at + 4, at + 8 + length)) >>> 0 === png.readUInt32BE(at + 8 + length);
    out.push({ type, data, crcOk });
    at += 12 + length;
  }
  return out;
}

t.test('a small valid PNG, the same for the same path', async (t) => {
  const png = demoPng('uploads/a/img-1.png');
  t.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'the PNG signature');
  const parts = chunks(png);
  t.same(
    parts.map((c) => c.type),
    ['IHDR', 'IDAT', 'IEND'],
  );
  t.ok(
    parts.every((c) => c.crcOk),
    'every CRC right',
  );
  t.same([...parts[0]!.data], [0, 0, 0, 16, 0, 0, 0, 16, 8, 2, 0, 0, 0], '16×16, 8-bit RGB');
  t.equal(
    zlib.inflateSync(parts[1]!.data).length,
    16 * (1 + 16 * 3),
    'the pixels inflate (the Adler-32 checked by zlib)',
  );
  t.ok(png.length < 1000, `${png.length} bytes`);
  t.ok(demoPng('uploads/a/img-1.png').equals(png), 'deterministic');
  t.notOk(demoPng('uploads/a/img-2.png').equals(png), 'another path, another image');
});

t.test('a backup of the demo with --media-dir: every referenced file saved, none missing', async (t) => {
  const db = await createTestDatabase(t);
  await seedGeneratedBooks(db.sql, [{ slug: 'demo', documents: 60, paragraphs: 1 }]);
  const config = testConfig(db.url);
  const exportSql = connect(db.url, {
    max: config.exportConcurrency,
    applicationName: 'kbx-test-export',
    fetchTypes: false,
  });
  const app = await buildApp({ config, sql: db.sql, exportSql, planSql: db.sql, logger: false });
  t.ok(registerDemoMedia(app, config.mediaProxyPrefix), 'registered under the root-relative prefix');
  const base = await listenOnLoopback(t, app, [exportSql]);

  const png = await request(`${base}/media/uploads/x/img-0.png`);
  t.equal(png.statusCode, 200);
  t.equal(png.headers['content-type'], 'image/png');
  t.ok(Buffer.from(await png.body.arrayBuffer()).equals(demoPng('uploads/x/img-0.png')));
  const text = await request(`${base}/media/attachments/1/Quarterly%20report.pdf`);
  t.equal(await text.body.text(), 'kb-export demo media: attachments/1/Quarterly report.pdf\n');
  t.equal((await request(`${base}/media/`)).statusCode, 404, 'the prefix itself is no file');

  const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-demo-media-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'demo.json');
  const r = await runBackupCli([
    '--server',
    base,
    '--book',
    'demo',
    '--out',
    out,
    '--media-dir',
    path.join(dir, 'media'),
  ]);
  t.equal(r.code, 0, r.stderr);
  const manifest = JSON.parse(readFileSync(`${out}.manifest.json`, 'utf8')) as {
    media: { path: string; contentType: string }[];
    summary: { files: number; missing: number };
  };
  t.equal(manifest.summary.missing, 0, 'nothing missing');
  t.ok(manifest.summary.files > 30, `${manifest.summary.files} media files`);
  const image = manifest.media.find((e) => e.path.endsWith('.png'))!;
  t.ok(
    readFileSync(path.join(dir, 'media', image.path)).equals(demoPng(encodeURI(image.path))),
    `${image.path} is its generated image`,
  );
  t.equal((await runCli(['verify', out])).code, 0, 'and verifies');
});

t.test('an absolute prefix is served elsewhere: nothing registered', async (t) => {
  const routes: unknown[] = [];
  const fake = { route: (r: unknown) => routes.push(r) } as unknown as Parameters<typeof registerDemoMedia>[0];
  t.notOk(registerDemoMedia(fake, 'https://cdn.example.com/m/'));
  t.same(routes, []);
});
