/**
 * Pipelined requests (decisions.md D8.10): HTTP/1.1 lets a client send its next request before the
 * previous response arrived; Node answers them in order, giving each response the socket only when
 * the one before it is done. An export whose response waits for its turn is neither a vanished
 * client nor a slow one: every export on the connection comes whole, streamed or from the cache.
 */
import net from 'node:net';
import t from 'tap';
import { parseRaw } from '../../helpers/clients.js';
import { doc, seed, simpleSeed, startServer } from '../../helpers/app.js';
import { createTestDatabase } from '../../helpers/db.js';

const DOCS = 400;

/** Sends `count` GETs of `path` in one write, the last with Connection: close; resolves with every byte the server sent. */
function pipelined(base: string, path: string, count: number): Promise<Buffer> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks)));
    const requests = Array.from(
      { length: count },
      (_, i) =>
        [
          `GET ${path} HTTP/1.1`,
          `Host: ${u.host}`,
          'Authorization: Bearer kbx_u1',
          ...(i === count - 1 ? ['Connection: close'] : []),
        ].join('\r\n') + '\r\n\r\n',
    );
    socket.write(requests.join(''));
  });
}

/** The responses in `raw`, one after another. */
function responses(raw: Buffer): ReturnType<typeof parseRaw>[] {
  const out: ReturnType<typeof parseRaw>[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const r = parseRaw(rest);
    out.push(r);
    if (!r.complete) break;
    // A chunked body ends with "0\r\n\r\n": the next response starts after it.
    const end = rest.indexOf('\r\n0\r\n\r\n', rest.indexOf('\r\n\r\n')) + 7;
    if (end < 7) break;
    rest = rest.subarray(end);
  }
  return out;
}

for (const cache of ['0', String(64 * 1024 * 1024)]) {
  t.test(
    `three pipelined exports on one connection all come whole (${cache === '0' ? 'streamed' : 'the later ones from the cache'})`,
    async (t) => {
      const db = await createTestDatabase(t);
      await seed(
        db.sql,
        simpleSeed(
          Array.from({ length: DOCS }, (_, i) =>
            doc(`d${i}`, `a${String(i).padStart(4, '0')}`, { contentStr: 'x'.repeat(500) }),
          ),
        ),
      );
      const server = await startServer(t, { EXPORT_CACHE_BYTES: cache, EXPORT_BATCH_SIZE: '50' }, db);
      const got = responses(await pipelined(server.url, '/api/v1/open/books/kb/docs', 3));
      t.equal(got.length, 3, 'three responses');
      for (const [i, r] of got.entries()) {
        t.equal(r.status, 200, `response ${i + 1}: 200`);
        t.ok(r.complete, `response ${i + 1}: its chunked body ended`);
        t.equal(
          (JSON.parse(r.body.toString('utf8')) as { meta: { count: number } }).meta.count,
          DOCS,
          `response ${i + 1}: every document`,
        );
      }
    },
  );
}
