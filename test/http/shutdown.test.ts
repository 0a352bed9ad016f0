/**
 * http/shutdown.ts: closing a server whose clients hold a connection that never sent a request,
 * without cutting a request that is under way.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import t from 'tap';
import { request } from 'undici';
import { trackUnusedConnections } from '../../src/http/shutdown.js';

async function listen(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

async function openSilent(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  await once(socket, 'connect');
  return socket;
}

/** Resolves true when server.close() completes within `ms` while closeIdle runs every 20 ms. */
async function closesWithin(server: Server, closeIdle: () => void, ms: number): Promise<boolean> {
  const closed = new Promise<boolean>((resolve) => server.close(() => resolve(true)));
  const sweep = setInterval(closeIdle, 20);
  try {
    return await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
  } finally {
    clearInterval(sweep);
  }
}

t.test('a connection that never sent a byte does not hold close() (nodejs/node#63452 on Node 20)', async (t) => {
  const server = createServer((_req, res) => res.end('ok'));
  const connections = trackUnusedConnections(server);
  const port = await listen(server);
  const silent = await openSilent(port);
  // A used keep-alive connection beside it, idle after its response.
  const res = await request(`http://127.0.0.1:${port}/`);
  t.equal(await res.body.text(), 'ok');
  await new Promise((r) => setTimeout(r, 50));
  const closed = await closesWithin(server, connections.closeIdle, 2000);
  t.equal(closed, true, 'closed at once');
  if (!closed) {
    silent.destroy();
    server.closeAllConnections();
    return;
  }
  if (!silent.destroyed) await once(silent, 'close');
  t.pass('the silent connection was closed by the server');
});

t.test('a request under way finishes; its connection then closes', async (t) => {
  const server = createServer((_req, res) => {
    setTimeout(() => res.end('late'), 300);
  });
  const connections = trackUnusedConnections(server);
  const port = await listen(server);
  const pending = request(`http://127.0.0.1:${port}/`).then((res) => res.body.text());
  await new Promise((r) => setTimeout(r, 50));
  const closed = closesWithin(server, connections.closeIdle, 5000);
  t.equal(await pending, 'late', 'the response was not cut off');
  t.equal(await closed, true, 'the server closed once the request was answered');
});
