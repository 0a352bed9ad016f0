/**
 * Request ids and the export's log lines over a real socket (decisions.md D10.5): a well-formed
 * X-Request-Id is echoed and put on every log line of its request, anything else is replaced by a
 * new UUID; an export logs one line when it starts and one when it ends, with the user and key ids
 * (never the key), the options, the count, bytes, duration and outcome.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { call } from '../helpers/http.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase, lockDocuments } from '../helpers/db.js';
import { startLoggedServer, type LoggedServer } from '../helpers/logged-app.js';
import { rawRequest, portOf } from '../helpers/raw-http.js';

const PATH = '/api/v1/open/books/kb/docs';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function until(what: string, check: () => boolean, limitMs = 5000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const linesOf = (server: LoggedServer, id: string) => server.logs.filter((l) => l.reqId === id);
const exportLines = (server: LoggedServer, id: string) =>
  linesOf(server, id).filter((l) => /^export (started|ended)$/.test(String(l.msg)));

t.test('X-Request-Id: echoed when well-formed, a new UUID otherwise, on every kind of response', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a0')]));
  const server = await startLoggedServer(t, db.url, { RATE_LIMIT_MAX: '6' });
  const cases: [string, string, string | null][] = [
    ['an export', PATH, 'Bearer kbx_u1'],
    ['401', PATH, 'Bearer kbx_nobody'],
    ['404 route', '/nope', null],
    ['/livez', '/livez', null],
  ];
  for (const [what, path, auth] of cases) {
    const id = `trace-${what.replace(/\W/g, '')}:01J9Z/ab+c=`;
    const res = await call(server.url, path, { auth, headers: { 'x-request-id': id } });
    t.equal(res.headers['x-request-id'], id, `${what}: echoed`);
    t.ok(linesOf(server, id).length > 0, `${what}: its log lines carry it`);
  }
  for (const bad of ['x'.repeat(129), 'has space', '<script>', '']) {
    const res = await call(server.url, PATH, { headers: { 'x-request-id': bad } });
    t.match(res.headers['x-request-id'], UUID, `${JSON.stringify(bad.slice(0, 12))}: replaced by a UUID`);
  }
  t.match((await call(server.url, PATH)).headers['x-request-id'], UUID, 'none sent: a UUID');
  const limited = await call(server.url, PATH, { headers: { 'x-request-id': 'over-the-limit' } });
  t.equal(limited.status, 429);
  t.equal(limited.headers['x-request-id'], 'over-the-limit', 'a 429 carries it too');
  const badUrl = await rawRequest(portOf(server.url), 'GET /%zz HTTP/1.1\r\nHost: x\r\nX-Request-Id: bad-url\r\n\r\n');
  t.equal(badUrl.status, 400);
  t.equal(badUrl.headers['x-request-id'], 'bad-url', 'a URL the router refuses: echoed');
  const unparsable = await rawRequest(portOf(server.url), 'GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n');
  t.equal(unparsable.status, 400);
  t.match(unparsable.headers['x-request-id'], UUID, 'a request Node cannot parse gets an id of its own');
});

t.test(
  'an export logs one line at its start and one at its end, with ids, options, count, bytes, ms and outcome',
  async (t) => {
    const db = await createTestDatabase(t);
    await seed(db.sql, simpleSeed([doc('d1', 'a0'), doc('d2', 'a1', { type: 'category' })]));
    const server = await startLoggedServer(t, db.url);
    const res = await call(server.url, `${PATH}?excludeCategories=false`, { headers: { 'x-request-id': 'exp-1' } });
    t.equal(res.status, 200);
    await until('the end line', () => exportLines(server, 'exp-1').length === 2);
    const [start, end] = exportLines(server, 'exp-1');
    t.match(start, {
      msg: 'export started',
      userId: 'u1',
      keyId: 'k-u1',
      bookSlug: 'kb',
      excludeCategories: false,
      includeContentHtml: true,
    });
    t.match(end, {
      msg: 'export ended',
      outcome: 'complete',
      userId: 'u1',
      keyId: 'k-u1',
      count: 2,
      bytes: Buffer.byteLength(res.text),
    });
    t.type(end!.ms, 'number');

    const again = await call(server.url, `${PATH}?excludeCategories=false`, { headers: { 'x-request-id': 'exp-2' } });
    t.equal(again.status, 200);
    t.match(
      exportLines(server, 'exp-2')[1],
      { outcome: 'complete', cached: true, count: 2, bytes: Buffer.byteLength(again.text) },
      'served from the cache',
    );
    t.notOk(JSON.stringify(server.logs).includes('kbx_u1'), 'the key is in no log line');
  },
);

t.test('export outcomes in the end line: client_gone, rejected, failed', async (t) => {
  const db = await createTestDatabase(t);
  await seed(
    db.sql,
    simpleSeed(
      Array.from({ length: 1500 }, (_, i) =>
        doc(`d${i}`, `a${String(i).padStart(5, '0')}`, { contentStr: 'x'.repeat(10_000) }),
      ),
    ),
  );
  const server = await startLoggedServer(t, db.url, {
    EXPORT_PER_USER_MAX: '1',
    EXPORT_CACHE_BYTES: '0',
    DB_TIMEOUT_MS: '700',
    STALL_TIMEOUT_MS: '100000',
  });

  // A client that asks and reads nothing holds the user's one export.
  const url = new URL(server.url);
  const holder = net.connect(Number(url.port), url.hostname);
  await new Promise((resolve) => holder.once('connect', resolve));
  holder.write(`GET ${PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_u1\r\nX-Request-Id: holder\r\n\r\n`);
  holder.pause();
  await until('the held export to start', () => exportLines(server, 'holder').length === 1);
  const refused = await call(server.url, PATH, { headers: { 'x-request-id': 'second' } });
  t.equal(refused.status, 429);
  t.match(exportLines(server, 'second')[1], { msg: 'export ended', outcome: 'rejected', reason: 'RATE_LIMITED' });
  holder.destroy();
  await until('the held export to end', () => exportLines(server, 'holder').length === 2, 10_000);
  t.match(exportLines(server, 'holder')[1], { outcome: 'client_gone' });

  await lockDocuments(t, db.sql);
  const failed = await call(server.url, PATH, { headers: { 'x-request-id': 'locked' } });
  t.equal(failed.status, 503);
  t.match(exportLines(server, 'locked')[1], { msg: 'export ended', outcome: 'failed', reason: /within 700 ms/ });
});
