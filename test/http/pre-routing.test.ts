/**
 * decisions.md D7.4 over raw sockets: errors raised before routing are the section 7 envelope
 * (malformed request line or header 400, headers too large 431, request not received in time 408,
 * a body 413, or 405 for another method), no request body is read, a client still sending one is
 * cut within seconds, and every method on the export path counts towards the rate limit (D5.4).
 */
import { connect } from 'node:net';
import type { ServerResponse } from 'node:http';
import t from 'tap';
import { request } from 'undici';
import { startServer as startServerProcess } from '../../bench/lib/server-process.js';
import { doc, seed, seedSizedBook, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { parseResponse, portOf, rawRequest, type RawAnswer } from '../helpers/raw-http.js';

type TapTest = Parameters<Parameters<typeof t.test>[0]>[0];

const EXPORT = '/api/v1/open/books/kb/docs';
const TIMEOUT_MS = 1000;
const HUGE = 'Content-Length: 100000000\r\n';
/** Under Fastify's default 1 MiB body limit, which would have waited for all of it. */
const LARGE = 'Content-Length: 500000\r\n';

/** The section 7 envelope, JSON, exactly success/code/message. */
function isEnvelope(t: TapTest, r: RawAnswer, status: number, code: string, what: string): void {
  t.equal(r.status, status, `${what}: status`);
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8', `${what}: content-type`);
  t.same(Object.keys(r.json ?? {}), ['success', 'code', 'message'], `${what}: exactly success, code, message`);
  t.equal(r.json?.success, false, `${what}: success false`);
  t.equal(r.json?.code, code, `${what}: code`);
  t.type(r.json?.message, 'string', `${what}: message`);
}

/** The answer said Connection: close and the server then closed the connection. */
function isClosed(t: TapTest, r: RawAnswer, what: string): void {
  t.match(r.headers.connection, /^close$/i, `${what}: Connection: close`);
  t.not(r.closedAfterMs, undefined, `${what}: the server closed the connection`);
}

let srv: TestServer;
let port: number;
t.before(async () => {
  srv = await startServer(t, { REQUEST_TIMEOUT_MS: String(TIMEOUT_MS) });
  await seed(srv.db.sql, simpleSeed([doc('a', 'a0')]));
  port = portOf(srv.url);
});

t.test('D7.4: a malformed request line is 400 BAD_REQUEST in the envelope; the connection closes', async (t) => {
  for (const line of [
    'GARBAGE',
    'GET /a b HTTP/1.1',
    `GET ${EXPORT} HTTP/1.1 extra`,
    'GET / HTTP/x.y',
    `GE\x01T ${EXPORT} HTTP/1.1`,
  ]) {
    const r = await rawRequest(port, `${line}\r\nHost: x\r\n\r\n`);
    isEnvelope(t, r, 400, 'BAD_REQUEST', JSON.stringify(line));
    isClosed(t, r, JSON.stringify(line));
  }
});

t.test('D7.4: a header with an invalid character, or without a colon, is 400 BAD_REQUEST', async (t) => {
  for (const header of ['X-A: a\x01b', 'X-A b', 'X A: b', 'Content-Length: ten']) {
    const r = await rawRequest(port, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\n${header}\r\n\r\n`);
    isEnvelope(t, r, 400, 'BAD_REQUEST', JSON.stringify(header));
    isClosed(t, r, JSON.stringify(header));
  }
});

t.test('D7.4: 20 KB of headers is 431 HEADERS_TOO_LARGE', async (t) => {
  const headers = Array.from({ length: 20 }, (_, i) => `X-Pad-${i}: ${'p'.repeat(1000)}\r\n`).join('');
  const r = await rawRequest(port, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`);
  isEnvelope(t, r, 431, 'HEADERS_TOO_LARGE', '20 KB of headers');
  isClosed(t, r, '20 KB of headers');
});

t.test('D7.4 / RFC 9112 3.2: an HTTP/1.1 request without Host is 400 BAD_REQUEST; HTTP/1.0 needs none', async (t) => {
  for (const path of [EXPORT, '/nope']) {
    const r = await rawRequest(port, `GET ${path} HTTP/1.1\r\nAuthorization: Bearer kbx_u1\r\n\r\n`);
    isEnvelope(t, r, 400, 'BAD_REQUEST', `no Host, ${path}`);
    isClosed(t, r, `no Host, ${path}`);
  }
  const old = await rawRequest(port, `GET ${EXPORT} HTTP/1.0\r\nAuthorization: Bearer kbx_u1\r\n\r\n`);
  t.equal(old.status, 200, 'HTTP/1.0 without Host is served');
});

t.test(
  'D7.4: a request not received within REQUEST_TIMEOUT_MS is 408 REQUEST_TIMEOUT, within a second of it',
  async (t) => {
    const cases: [string, Promise<RawAnswer>][] = [
      ['a request line that never completes', rawRequest(port, 'GET /api/v1/open/bo')],
      ['headers that never end', rawRequest(port, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\n`)],
      [
        'a header trickled 2 bytes every 100 ms',
        rawRequest(port, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nX-Slow: `, { trickle: { bytes: 'ab', everyMs: 100 } }),
      ],
      ['a connection that sends nothing', rawRequest(port, '')],
    ];
    for (const [what, pending] of cases) {
      const r = await pending;
      isEnvelope(t, r, 408, 'REQUEST_TIMEOUT', what);
      isClosed(t, r, what);
      t.ok(r.closedAfterMs! >= TIMEOUT_MS - 50, `${what}: not before the timeout (${r.closedAfterMs} ms)`);
      t.ok(r.closedAfterMs! <= TIMEOUT_MS + 2000, `${what}: within seconds of it (${r.closedAfterMs} ms)`);
    }
  },
);

t.test(
  'D7.4: a client that keeps sending and reads late still gets its 408: the server lingers instead of resetting',
  async (t) => {
    // Closing while the client still sends makes its kernel answer the next bytes with a reset, which
    // discards an answer the client has not read yet; a busy client reads late.
    const lateReader = () =>
      rawRequest(port, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nX-Slow: `, {
        trickle: { bytes: 'ab', everyMs: 100 },
        readAfterMs: TIMEOUT_MS + 1500,
      });
    for (const [i, answer] of (await Promise.all([lateReader(), lateReader(), lateReader()])).entries()) {
      isEnvelope(t, answer, 408, 'REQUEST_TIMEOUT', `late reader ${i + 1}`);
      t.equal(answer.error, undefined, `late reader ${i + 1}: no reset (${answer.error})`);
      t.ok(answer.closedAfterMs! < TIMEOUT_MS + 5000, `late reader ${i + 1}: closed after ${answer.closedAfterMs} ms`);
    }
  },
);

t.test('the request timeout does not cut a keep-alive connection idle between requests', async (t) => {
  const socket = connect(port, '127.0.0.1');
  let raw = '';
  socket.on('data', (d: Buffer) => (raw += d.toString('latin1')));
  const closed = new Promise((resolve) => socket.on('close', resolve));
  socket.write('GET /nope HTTP/1.1\r\nHost: x\r\n\r\n');
  await new Promise((r) => setTimeout(r, TIMEOUT_MS * 2.5));
  t.equal(parseResponse(raw).status, 404, 'the first request was answered');
  t.equal(socket.destroyed, false, 'the idle connection is still open');
  socket.write('GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await closed;
  t.equal(raw.match(/HTTP\/1\.1 \d{3} /g)?.join(), 'HTTP/1.1 404 ,HTTP/1.1 404 ', 'both requests answered 404, no 408');
});

t.test('D7.4: the request timeout bounds receiving the request, not a long export stream', async (t) => {
  // About 24 MB of JSON: more than the socket buffers hold, so the export waits on the client. A
  // user of its own on the file's database, its documents built in PostgreSQL.
  await seedSizedBook(srv.db.sql, 'u2', 500, { content_str: `repeat('x', 48000)` });
  const s = await startServer(t, { REQUEST_TIMEOUT_MS: '500', MIN_DRAIN_BYTES_PER_S: '0' }, srv.db);
  const responses: ServerResponse[] = [];
  s.app.server.on('request', (_req, res: ServerResponse) => responses.push(res));
  const res = await request(`${s.url}${EXPORT}?includeContentHtml=false`, {
    headers: { authorization: 'Bearer kbx_u2' },
  });
  t.equal(res.statusCode, 200);
  const chunks: Buffer[] = [];
  const body = res.body[Symbol.asyncIterator]();
  chunks.push((await body.next()).value as Buffer);
  // Four timeouts and several checking intervals without reading a byte.
  await new Promise((r) => setTimeout(r, 2000));
  t.equal(responses[0]?.writableEnded, false, 'the export was still streaming long after the request timeout');
  for (let c = await body.next(); !c.done; c = await body.next()) chunks.push(c.value as Buffer);
  const json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  t.equal(json.meta?.count, 500, 'the whole export arrived');
});

t.test(
  'D7.4: a body on the export path is never read: POST/PUT 405, GET/HEAD 413, then the connection closes',
  async (t) => {
    // A large body announced, a few bytes sent: the answer comes without the rest, and the connection closes.
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
      for (const length of [HUGE, LARGE]) {
        const what = `${method} ${length.trim()}`;
        const r = await rawRequest(
          port,
          `${method} ${EXPORT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${length}\r\n{"a":`,
        );
        isEnvelope(t, r, 405, 'METHOD_NOT_ALLOWED', what);
        t.equal(r.headers.allow, 'GET, HEAD', `${what}: Allow`);
        isClosed(t, r, what);
      }
    }
    const get = await rawRequest(
      port,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_u1\r\n${HUGE}\r\nabc`,
    );
    isEnvelope(t, get, 413, 'PAYLOAD_TOO_LARGE', 'GET with Content-Length');
    isClosed(t, get, 'GET with Content-Length');
    const chunked = await rawRequest(
      port,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n`,
    );
    isEnvelope(t, chunked, 413, 'PAYLOAD_TOO_LARGE', 'GET with a chunked body');
    isClosed(t, chunked, 'GET with a chunked body');
    const head = await rawRequest(port, `HEAD ${EXPORT} HTTP/1.1\r\nHost: x\r\n${HUGE}\r\nabc`);
    t.equal(head.status, 413, 'HEAD with a body: 413');
    isClosed(t, head, 'HEAD with a body');
    const empty = await rawRequest(
      port,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
    );
    isEnvelope(t, empty, 401, 'INVALID_API_KEY', 'Content-Length: 0 is no body');
  },
);

t.test('D7.4: a body on an unknown path gets the 404 without being read; the connection closes', async (t) => {
  for (const length of [HUGE, LARGE]) {
    const r = await rawRequest(
      port,
      `POST /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${length}\r\n{"a":`,
    );
    isEnvelope(t, r, 404, 'NOT_FOUND', `POST /nope, ${length.trim()}`);
    isClosed(t, r, `POST /nope, ${length.trim()}`);
  }
});

t.test('D7.4: a client asking 100-continue is not invited to send its body: it gets its answer at once', async (t) => {
  const r = await rawRequest(port, `POST ${EXPORT} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n${HUGE}\r\n`);
  t.notMatch(r.raw, /100 Continue/, 'no 100 Continue');
  isEnvelope(t, r, 405, 'METHOD_NOT_ALLOWED', 'Expect: 100-continue');
  const odd = await rawRequest(
    port,
    `GET /nope HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nConnection: close\r\n\r\n`,
  );
  isEnvelope(t, odd, 404, 'NOT_FOUND', 'an unknown expectation is ignored, not an empty 417');
});

t.test(
  'D7.3: the 405 does not depend on the body headers (a malformed Content-Type, QUERY without one) or the method',
  async (t) => {
    const requests = [
      `POST ${EXPORT} HTTP/1.1\r\nHost: x\r\nContent-Type: ;;\r\nContent-Length: 2\r\n\r\nab`,
      `QUERY ${EXPORT} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab`,
      `PROPFIND ${EXPORT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      `TRACE ${EXPORT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
    ];
    for (const req of requests) {
      const what = req.slice(0, req.indexOf(' /'));
      const r = await rawRequest(port, req);
      isEnvelope(t, r, 405, 'METHOD_NOT_ALLOWED', what);
      t.equal(r.headers.allow, 'GET, HEAD', `${what}: Allow`);
    }
  },
);

t.test(
  'D7.4 / D5.4: every method on the export path counts towards the rate limit, checked before 405 and 413',
  async (t) => {
    const limited = await startServer(t, { RATE_LIMIT_MAX: '2', REQUEST_TIMEOUT_MS: String(TIMEOUT_MS) }, srv.db);
    const p = portOf(limited.url);
    const post = `POST ${EXPORT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    isEnvelope(t, await rawRequest(p, post), 405, 'METHOD_NOT_ALLOWED', 'first POST');
    isEnvelope(t, await rawRequest(p, post), 405, 'METHOD_NOT_ALLOWED', 'second POST');
    const third = await rawRequest(p, post);
    isEnvelope(t, third, 429, 'RATE_LIMITED', 'third POST');
    t.match(third.headers['retry-after'], /^\d+$/, 'Retry-After in seconds');
    isClosed(t, third, 'third POST (its body was not read)');
    for (const req of [
      `PROPFIND ${EXPORT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\n${HUGE}\r\nabc`,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_u1\r\nConnection: close\r\n\r\n`,
    ]) {
      isEnvelope(t, await rawRequest(p, req), 429, 'RATE_LIMITED', req.slice(0, req.indexOf('\r\n')));
    }
    const other = await startServer(t, { RATE_LIMIT_MAX: '2' }, srv.db);
    const q = portOf(other.url);
    t.equal((await rawRequest(q, `PROPFIND ${EXPORT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).status, 405);
    t.equal((await rawRequest(q, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\n${HUGE}\r\nabc`)).status, 413);
    const get = await rawRequest(
      q,
      `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_u1\r\nConnection: close\r\n\r\n`,
    );
    isEnvelope(t, get, 429, 'RATE_LIMITED', 'a GET after a PROPFIND and a GET with a body');
  },
);

t.test(
  'D7.4: 1,000 slow clients (bodies and headers trickled 2 bytes every 100 ms) are all cut within seconds; memory stays flat',
  async (t) => {
    const N = 500; // of each kind
    // A process of its own, so its RSS is the server's alone (/proc/<pid>/status).
    // A request timeout long enough that "cut at once" and "cut by the timeout" stay apart on a
    // loaded two-core machine, where opening 1,000 connections alone takes a second or two.
    // Without D8.8's event-loop guard: on a starved host it answers some of these 503 before the
    // 405/413 this test is about (seen in CI as one envelope of 500 missing).
    const server = await startServerProcess({
      databaseUrl: srv.db.url,
      env: { REQUEST_TIMEOUT_MS: '4000', MAX_EVENT_LOOP_DELAY_MS: '0' },
      coverage: false,
    });
    t.teardown(() => server.stop());
    const p = portOf(server.base);
    await server.resetPeak();
    const before = await server.rss();
    const trickle = { bytes: 'ab', everyMs: 100 };
    const started = Date.now();
    const bodies = Array.from({ length: N }, (_, i) =>
      rawRequest(p, `${i % 2 ? 'POST' : 'GET'} ${EXPORT} HTTP/1.1\r\nHost: x\r\n${HUGE}\r\nab`, {
        trickle,
        deadlineMs: 20_000,
      }),
    );
    const headers = Array.from({ length: N }, () =>
      rawRequest(p, `GET ${EXPORT} HTTP/1.1\r\nHost: x\r\nX-Slow: `, { trickle, deadlineMs: 20_000 }),
    );
    const answers = await Promise.all([...bodies, ...headers]);
    const allCutMs = Date.now() - started;
    const peak = await server.peakRss();
    // The first three that missed, as the client saw them.
    const wrong = (expect: (r: RawAnswer, i: number) => boolean, list: RawAnswer[]) =>
      list
        .filter((r, i) => !expect(r, i))
        .slice(0, 3)
        .map((r) => ({
          status: r.status,
          code: r.json?.code,
          closedAfterMs: r.closedAfterMs,
          error: r.error,
          bytes: r.raw.length,
        }));
    const bodyAnswers = answers.slice(0, N);
    const headerAnswers = answers.slice(N);
    t.same(
      wrong(
        (r, i) => r.json?.code === (i % 2 ? 'METHOD_NOT_ALLOWED' : 'PAYLOAD_TOO_LARGE') && r.json?.success === false,
        bodyAnswers,
      ),
      [],
      'each body trickler got its 405 or 413 envelope',
    );
    t.same(
      wrong((r) => r.closedAfterMs !== undefined && r.closedAfterMs < 3500, bodyAnswers),
      [],
      'each was cut at once, not after the request timeout',
    );
    t.same(
      wrong((r) => r.json?.code === 'REQUEST_TIMEOUT' && r.status === 408, headerAnswers),
      [],
      'each header trickler got the 408 envelope',
    );
    t.same(
      wrong((r) => r.closedAfterMs !== undefined && r.closedAfterMs < 8000, headerAnswers),
      [],
      'each was cut within seconds of REQUEST_TIMEOUT_MS',
    );
    t.ok(allCutMs < 12_000, `all ${2 * N} connections were closed after ${allCutMs} ms`);
    const grownMb = (peak - before) / 1024 / 1024;
    t.ok(grownMb < 40, `peak RSS grew by ${grownMb.toFixed(1)} MB (from ${(before / 1024 / 1024).toFixed(0)} MB)`);
  },
);
