/**
 * `kb-export backup` (a child process) against a stub server over real sockets, by the response's
 * Content-Encoding: when it is PATH's compression, the file holds the server's bytes exactly as
 * sent (compressed once, by the server); any other encoding, identity included, is decoded,
 * verified and compressed by the client. A compressed body that is not whole (a gzip stream
 * without its trailer, a whole stream of a cut or failed export) is refused: PATH untouched and no
 * temporary file left.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { runBackupCli } from '../helpers/backup-cli.js';
import { exportBody, startStub } from '../helpers/export-stub.js';

// 60 documents of 1 KB: several 16 KB pieces on the wire; the size is not the point.
const DOCS = 60;
const body = exportBody(DOCS);
type Encoding = 'gzip' | 'br' | 'zstd' | 'identity';
type ZstdZlib = typeof zlib & {
  zstdCompressSync?: (b: Buffer, o: object) => Buffer;
  constants: { ZSTD_c_compressionLevel?: number };
};
const z = zlib as ZstdZlib;
// Settings the client never uses itself, so a file equal to these bytes can only be the server's.
const encode: Record<Encoding, (b: Buffer) => Buffer> = {
  gzip: (b) => zlib.gzipSync(b, { level: 1 }),
  br: (b) => zlib.brotliCompressSync(b, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 1 } }),
  zstd: (b) => z.zstdCompressSync!(b, { params: { [z.constants.ZSTD_c_compressionLevel!]: 1 } }),
  identity: (b) => b,
};
const decodeFile = (name: string, b: Buffer) =>
  name.endsWith('.gz') ? zlib.gunzipSync(b) : name.endsWith('.br') ? zlib.brotliDecompressSync(b) : b;
// zstd where the runtime has it (Node.js 24).
const ZSTD = typeof z.zstdCompressSync === 'function' ? ([['a.json.zst', 'zstd']] as const) : [];

/** What the stub sends for a book slug `ENCODING[-VARIANT]`: the bytes and their Content-Encoding. */
function response(slug: string): { encoding: Encoding; bytes: Buffer } {
  const [encoding, variant] = slug.split('-') as [Encoding, string | undefined];
  if (variant === 'notrailer') return { encoding, bytes: encode[encoding](body).subarray(0, -8) };
  if (variant === 'cut') return { encoding, bytes: encode[encoding](body.subarray(0, body.length >> 1)) };
  if (variant === 'failed')
    return {
      encoding,
      bytes: encode[encoding](Buffer.from(body.toString().replace('{"success":true', '{"success":false'))),
    };
  if (variant === 'miscounted')
    return {
      encoding,
      bytes: encode[encoding](Buffer.from(body.toString().replace(`"count":${DOCS}}}`, `"count":${DOCS + 1}}}`))),
    };
  return { encoding, bytes: encode[encoding](body) };
}

const stub = await startStub(t, (req, res) => {
  const slug = decodeURIComponent(/\/books\/([^/]+)\/docs/.exec(req.url ?? '')![1]!);
  const { encoding, bytes } = response(slug);
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    etag: '"stub"',
    ...(encoding === 'identity' ? {} : { 'content-encoding': encoding }),
  });
  // In pieces, as a streamed export arrives.
  for (let i = 0; i < bytes.length; i += 16 * 1024) res.write(bytes.subarray(i, i + 16 * 1024));
  res.end();
});
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-download-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const leftovers = () => readdirSync(dir).filter((f) => f.endsWith('.tmp'));
const backup = (book: string, name: string, ...more: string[]) =>
  runBackupCli(['--server', stub.base, '--book', book, '--out', path.join(dir, name), ...more]);

t.test("PATH's compression offered by the server: the file is the server's bytes as sent", async (t) => {
  for (const [name, encoding] of [['a.json.gz', 'gzip'] as const, ['a.json.br', 'br'] as const, ...ZSTD]) {
    const r = await backup(encoding, name);
    t.equal(r.code, 0, r.stderr);
    t.match(
      stub.requests.at(-1)!.headers['accept-encoding'],
      new RegExp(`^${encoding}(,|$)`),
      `${name}: asks for ${encoding} first`,
    );
    t.ok(
      readFileSync(path.join(dir, name)).equals(encode[encoding](body)),
      `${name}: byte for byte what the server sent`,
    );
    t.match(
      r.stderr,
      new RegExp(`${DOCS} documents, ${body.length} bytes \\(\\d+ on disk, ${encoding} as the server sent it\\)`),
    );
  }
  t.same(leftovers(), []);
});

t.test('another encoding, or none: decoded, verified and compressed by the client', async (t) => {
  for (const [name, encoding] of [
    ['b.json.gz', 'identity'],
    ['c.json.gz', 'br'],
    ['d.json.br', 'gzip'],
    ['e.json', 'gzip'],
  ] as const) {
    const r = await backup(encoding, name);
    t.equal(r.code, 0, r.stderr);
    const file = readFileSync(path.join(dir, name));
    t.ok(decodeFile(name, file).equals(body), `${name} from ${encoding}: holds the export`);
    if (name.endsWith('.json')) t.ok(file.equals(body), `${name}: plain`);
    else {
      t.notOk(file.equals(encode[encoding](body)), `${name} from ${encoding}: not the server's bytes`);
      t.match(r.stderr, /\(\d+ on disk, compressed here\)/);
    }
  }
  t.same(leftovers(), []);
});

t.test('a plain PATH asks for the identity body, as curl -o does; --compressed asks for compression', async (t) => {
  const plain = await backup('identity', 'p.json');
  t.equal(plain.code, 0, plain.stderr);
  t.equal(stub.requests.at(-1)!.headers['accept-encoding'], 'identity', 'no compression in transit');
  t.ok(readFileSync(path.join(dir, 'p.json')).equals(body));
  const compressed = await backup('gzip', 'q.json', '--compressed');
  t.equal(compressed.code, 0, compressed.stderr);
  t.match(stub.requests.at(-1)!.headers['accept-encoding'], /\bgzip\b/, '--compressed offers gzip');
  t.notMatch(
    stub.requests.at(-1)!.headers['accept-encoding'],
    /zstd/,
    'but not zstd, whose decoder keeps a whole batch back until its block ends',
  );
  t.ok(readFileSync(path.join(dir, 'q.json')).equals(body), 'decoded into the plain file');
  t.same(leftovers(), []);
});

t.test('a compressed body that is not whole is refused: PATH untouched, no temporary file', async (t) => {
  for (const [name, book, why] of [
    ['f.json.gz', 'gzip-notrailer', /unexpected end of file/],
    ['f.json.gz', 'gzip-cut', /not valid JSON|cut short/],
    ['f.json.gz', 'gzip-failed', /does not start with "success": true/],
    ['f.json.br', 'br-miscounted', new RegExp(`meta\\.count is ${DOCS + 1} but ${DOCS} documents arrived`)],
  ] as const) {
    writeFileSync(path.join(dir, name), 'the old backup');
    const r = await backup(book, name, '--retries', '0');
    t.equal(r.code, 1, `${book}: exit 1`);
    t.match(r.stderr, why, `${book}: says why`);
    t.equal(r.stderr.trim().split('\n').length, 1, `${book}: one line`);
    t.equal(readFileSync(path.join(dir, name), 'utf8'), 'the old backup', `${book}: PATH as it was`);
    t.same(leftovers(), [], `${book}: no temporary file`);
  }
});
