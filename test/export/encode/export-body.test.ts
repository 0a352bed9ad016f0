/**
 * The export's body stage (src/export/encode/export-body.ts) over a real HTTP response: the JSON text in
 * order with meta.count last, chunks of small parts joined, a large document written without being
 * copied into a chunk (JsonChunker.takeChunks), and the cache's copy kept only within its limit.
 */
import type { BookRow } from '../../../src/export/request/book.js';
import { bodySink } from '../../../src/export/respond/compression.js';
import http from 'node:http';
import zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { request } from 'undici';
import { ExportBody } from '../../../src/export/encode/export-body.js';
import { JsonChunker } from '../../../src/export/encode/json-encoder.js';
import { rowFromValues, type DocumentValues } from '../../../bench/lib/rows.js';
import { ResponseWriter } from '../../../src/export/respond/response-writer.js';

const BOOK: BookRow = {
  id: 'b1',
  slug: 'kb',
  name: 'KB',
  description: null,
  cover_image: null,
  created_at: '2024-03-01T10:00:00.000Z',
  updated_at: '2024-03-02T10:00:00.000Z',
  export_version: 'v',
};

function values(id: string, contentStr: string | null): DocumentValues {
  return [
    id,
    id,
    `Doc ${id}`,
    'document',
    null,
    `a-${id}`,
    null,
    null,
    null,
    null,
    null,
    null,
    null,
    null,
    '2024-03-01T10:00:00.000Z',
    '2024-03-01T10:00:00.000Z',
    contentStr,
    null,
  ];
}

/** Runs `write` against a real response; resolves with the body the client read and what `write` returned. */
async function serve<T>(write: (body: ExportBody, writer: ResponseWriter) => Promise<T>, captureUpTo?: number) {
  let result!: T;
  const server = http.createServer(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const writer = new ResponseWriter(res, { stallTimeoutMs: 10_000, minDrainBytesPerS: 0, maxDurationMs: 0 });
    const body = new ExportBody(bodySink(writer, 'identity'), {
      chunkSize: 1024,
      pause: async () => {},
      ...(captureUpTo !== undefined ? { captureUpTo } : {}),
    });
    result = await write(body, writer);
    writer.close();
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    return { text: await res.body.text(), result };
  } finally {
    server.close();
  }
}

t.test('documents in order, meta.count last, the copy for the cache equal to what was sent', async (t) => {
  const rows = ['d1', 'd2', 'd3'].map((id) => rowFromValues(values(id, 'x'.repeat(700))));
  const { text, result } = await serve(async (body) => {
    body.open(BOOK);
    await body.writeBatch(rows, { coverUrls: rows.map(() => null), contentHtml: rows.map(() => null), bytes: 0 });
    await body.finish();
    return { count: body.count, captured: body.captured };
  }, 1 << 20);
  const json = JSON.parse(text) as { documents: { id: string }[]; meta: { count: number } };
  t.same(
    json.documents.map((d) => d.id),
    ['d1', 'd2', 'd3'],
  );
  t.same(json.meta, { count: 3 });
  t.ok(text.endsWith('],"meta":{"count":3}}'), 'meta.count is the last thing in the body (D2.5)');
  t.equal(result.count, 3);
  t.equal(result.captured?.toString(), text, 'the kept copy is byte for byte the body');
});

t.test('a body larger than captureUpTo is not kept', async (t) => {
  const rows = [rowFromValues(values('d1', 'y'.repeat(5000)))];
  const { result } = await serve(async (body) => {
    body.open(BOOK);
    await body.writeBatch(rows, { coverUrls: [null], contentHtml: [null], bytes: 0 });
    await body.finish();
    return body.captured;
  }, 1000);
  t.equal(result, undefined);
});

t.test('takeChunks joins runs of small parts and passes a large part on as the same Buffer', async (t) => {
  const c = new JsonChunker(100);
  const big = Buffer.alloc(500, 0x61);
  c.push('{"a":');
  c.push('1,');
  c.push(big);
  c.push(',"b":2}');
  const chunks = c.takeChunks();
  t.same(
    chunks.map((b) => b.toString()),
    ['{"a":1,', big.toString(), ',"b":2}'],
  );
  t.equal(chunks[1], big, 'the large part is not copied');
  t.same(c.takeChunks(), [], 'nothing left');
});

t.test(
  'chunk memory filled again after the socket or compressor is done with it: bodies stay byte-exact',
  async (t) => {
    // Bodies of several MB, read slowly, so writes wait on the socket and chunks are out while more are filled.
    const rows = Array.from({ length: 3000 }, (_, i) =>
      rowFromValues(
        values(`d${i}`, `<p>${String.fromCharCode(0x41 + (i % 26)).repeat(100 + ((i * 7919) % 3500))}</p>`),
      ),
    );
    const batch = { coverUrls: rows.map(() => null), contentHtml: rows.map(() => null), bytes: 0 };
    const write = async (body: ExportBody) => {
      body.open(BOOK);
      await body.writeBatch(rows.slice(0, 1500), batch);
      await body.flush();
      await body.writeBatch(rows.slice(1500), batch);
      await body.finish();
    };
    // What the body must be: every chunk copied as it is taken, nothing given back.
    const expected: Buffer[] = [];
    const copying = {
      write: async (c: Buffer) => void expected.push(Buffer.from(c)),
      flush: async () => {},
      end: async () => {},
    };
    await write(new ExportBody(copying, { chunkSize: 4096, pause: async () => {} }));
    const want = Buffer.concat(expected);

    for (const encoding of ['identity', 'gzip'] as const) {
      const memory = new Set<ArrayBufferLike>();
      let chunks = 0;
      let released = 0;
      const server = http.createServer(async (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const writer = new ResponseWriter(res, { stallTimeoutMs: 10_000, minDrainBytesPerS: 0, maxDurationMs: 0 });
        const sink = bodySink(writer, encoding);
        const watched = {
          write: (chunk: Buffer, written?: () => void) => {
            chunks++;
            memory.add(chunk.buffer);
            return sink.write(chunk, () => {
              released++;
              written?.();
            });
          },
          flush: () => sink.flush(),
          end: () => sink.end(),
        };
        await write(new ExportBody(watched, { chunkSize: 4096, flushEachBatch: true, pause: async () => {} }));
        writer.close();
        res.end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
        const got: Buffer[] = [];
        let n = 0;
        for await (const part of res.body) {
          got.push(part as Buffer);
          if (++n % 8 === 0) await new Promise((r) => setTimeout(r, 2));
        }
        const raw = Buffer.concat(got);
        const body = encoding === 'gzip' ? zlib.gunzipSync(raw) : raw;
        t.ok(body.equals(want), `${encoding}: the body read slowly is byte for byte the expected one`);
        t.ok(released > 0 && released <= chunks, `${encoding}: chunks given back (${released} of ${chunks})`);
        t.ok(memory.size < chunks / 4, `${encoding}: ${chunks} chunks written from ${memory.size} buffers`);
      } finally {
        server.close();
      }
    }
  },
);
