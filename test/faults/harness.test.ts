/**
 * The fault harness itself, so the fault suites' verdicts can be trusted: the TCP proxy cuts,
 * freezes, refuses and slows a real link without buffering what it cannot forward, and the raw
 * client tells a whole chunked body from one cut at any byte.
 */
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { parseRaw, rawGet } from '../helpers/clients.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const MB = 1024 * 1024;

/**
 * A TCP server that sends `bytes` bytes to each connection in 64 KB writes as fast as they are
 * taken, then closes; `sent()` counts what its sockets took (Node queues at most one write more).
 */
async function source(t: Test, bytes: number) {
  const sockets: net.Socket[] = [];
  const piece = Buffer.alloc(64 * 1024, 'x');
  let sent = 0;
  const server = net.createServer((s) => {
    sockets.push(s);
    s.on('error', () => {});
    let left = bytes;
    const pump = () => {
      while (left > 0) {
        const n = Math.min(left, piece.length);
        left -= n;
        sent += n;
        if (!s.write(piece.subarray(0, n))) return void s.once('drain', pump);
      }
      s.end();
    };
    pump();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    for (const sock of sockets) sock.destroy();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, sent: () => sent };
}

/** Connects to `port` and counts what arrives until the connection closes. */
function receive(port: number): { socket: net.Socket; received: () => number; closed: Promise<void> } {
  const socket = net.connect(port, '127.0.0.1');
  let received = 0;
  socket.on('error', () => {});
  socket.on('data', (d: Buffer) => (received += d.length));
  return { socket, received: () => received, closed: once(socket, 'close').then(() => undefined) };
}

t.test('a whole transfer passes unchanged; cutAfter(n) cuts the next connection at n bytes and disarms', async (t) => {
  const src = await source(t, 2 * MB);
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: src.port });
  const whole = receive(proxy.port);
  await whole.closed;
  t.equal(whole.received(), 2 * MB, 'all bytes and the close went through');
  proxy.cutAfter(300_000);
  const cut = receive(proxy.port);
  await cut.closed;
  t.ok(cut.received() <= 300_000 && cut.received() > 0, `the client got ${cut.received()} of at most 300000 bytes`);
  t.equal(proxy.stats().cuts, 1);
  const after = receive(proxy.port);
  await after.closed;
  t.equal(after.received(), 2 * MB, 'the cut was one-shot');
});

t.test('stall() forwards nothing and buffers at most a chunk; resume() goes on; cutAll() ends it', async (t) => {
  const src = await source(t, 64 * MB);
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: src.port });
  const c = receive(proxy.port);
  while (c.received() === 0) await sleep(5);
  proxy.stall();
  await sleep(100);
  const frozenAt = c.received();
  await sleep(300);
  t.equal(c.received(), frozenAt, 'nothing arrives while frozen');
  // Kernel buffers on both sides of the proxy hold a few MB; a proxy reading on regardless would hold 60.
  const held = src.sent() - frozenAt;
  t.ok(held < 16 * MB, `${(held / MB).toFixed(1)} MB held between the sender and the client while frozen`);
  t.equal(proxy.stats().open, 1, 'the link stays open');
  proxy.resume();
  while (c.received() <= frozenAt) await sleep(5);
  t.pass('bytes flow again after resume()');
  t.equal(proxy.cutAll(), 1);
  await c.closed;
  t.ok(c.received() < 64 * MB, 'cut before the end');
});

t.test('a side that closes during a stall is passed on only at resume()', async (t) => {
  const src = await source(t, 1000);
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: src.port });
  proxy.stall();
  const c = receive(proxy.port);
  let closed = false;
  void c.closed.then(() => (closed = true));
  await sleep(300);
  t.equal(c.received(), 0);
  t.notOk(closed, 'the source has closed, the frozen link has not');
  proxy.resume();
  await c.closed;
  t.equal(c.received(), 1000, 'then the bytes and the close arrive');
});

t.test('refuse(true) closes new connections at once; throttle() slows a transfer', async (t) => {
  const src = await source(t, 100_000);
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: src.port });
  proxy.refuse(true);
  const refused = receive(proxy.port);
  await refused.closed;
  t.equal(refused.received(), 0, 'a refused connection gets nothing');
  proxy.refuse(false);
  proxy.throttle(200_000);
  const started = Date.now();
  const slow = receive(proxy.port);
  await slow.closed;
  t.equal(slow.received(), 100_000, 'everything arrives');
  // A floor only: 100 KB at 200 KB/s cannot take much less than 0.4 s (its last tenth goes at 0.4 s).
  t.ok(Date.now() - started >= 350, `throttled transfer took ${Date.now() - started} ms`);
});

t.test(
  'parseRaw: a chunked body is complete only with its terminating chunk, whatever byte it is cut at',
  async (t) => {
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"a":');
      res.write('[1,2,3]');
      res.end('}');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.teardown(() => server.close());
    const whole = await rawGet(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {});
    t.equal(whole.status, 200);
    t.ok(whole.complete, 'the whole response is complete');
    t.equal(whole.body.toString(), '{"a":[1,2,3]}', 'the body is de-chunked');
    const early = [];
    for (let k = 0; k < whole.raw.length; k++) if (parseRaw(whole.raw.subarray(0, k)).complete) early.push(k);
    t.strictSame(early, [], 'no cut before the last byte reads as complete');
  },
);
