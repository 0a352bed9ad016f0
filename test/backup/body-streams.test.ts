/**
 * The streams a downloaded export passes through (src/backup/body-streams.ts): untilCut() ends a
 * response body where it fails, having passed on every byte that came before the failure, even
 * those still in the body's buffer when the connection's close was seen.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { request } from 'undici';
import { untilCut } from '../../src/backup/body-streams.js';

t.test('a body closed with its bytes still buffered: every byte passed on, then the cut', async (t) => {
  const sent = 20_000;
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-length': String(2 * sent) });
    res.write(Buffer.alloc(sent, 'x'), () => setTimeout(() => res.socket!.destroy(), 50));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  const body = untilCut(res.body);
  // Nothing read until the close was seen: the bytes wait in the body's buffer.
  await new Promise((resolve) => setTimeout(resolve, 300));
  let got = 0;
  for await (const chunk of body.source) got += (chunk as Buffer).length;
  t.equal(got, sent, 'every byte that arrived');
  t.match(body.cut()?.message, /closed/, 'and the cut');
});

t.test('a whole body: every byte, no cut', async (t) => {
  const server = http.createServer((_req, res) => res.end(Buffer.alloc(50_000, 'y')));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  const body = untilCut(res.body);
  let got = 0;
  for await (const chunk of body.source) got += (chunk as Buffer).length;
  t.equal(got, 50_000);
  t.equal(body.cut(), null);
});
