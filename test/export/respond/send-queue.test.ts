/**
 * The kernel send-queue probe (src/export/respond/send-queue.ts): the row of a /proc/net/tcp table found by
 * its inode column alone (a table and a descriptor link put in place of /proc's), and, on Linux, a real connection whose client does not read showing the
 * bytes its server's kernel holds, down to 0 once the client has read them.
 */
import { once } from 'node:events';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { sendQueueProbe } from '../../../src/export/respond/send-queue.js';

const TABLE = [
  '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
  '   0: 0100007F:107E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  6949        0 1234 1 000000007aaf4ee4 100 0 0 10 0',
  '   1: 0100007F:1111 0100007F:A2C4 01 003A9F00:00000000 01:00000014 00000000     0     6949 6949 1 00000000633cae65 20 4 30 10 -1',
  '   2: 0100007F:1111 0100007F:A2C6 01 00000000:0001F000 00:00000000 00000000     0        0 7001 1 00000000633cae66 20 4 30 10 -1',
  '',
].join('\n');

/** What the probe answers for a socket whose descriptor is a link to `socket:[inode]`, with TABLE as /proc/self/net/tcp. */
async function probedFromTable(t: Test, inode: string): Promise<number | null> {
  const read: string[] = [];
  const { sendQueueProbe: probeOf } = await t.mockImport<typeof import('../../../src/export/respond/send-queue.js')>(
    new URL('../../../src/export/respond/send-queue.js', import.meta.url).href,
    {
      'node:fs/promises': {
        readFile: async (file: string) => (read.push(file), TABLE),
        readlink: async (link: string) => (link === '/proc/self/fd/7' ? `socket:[${inode}]` : ''),
      },
    },
  );
  // Only what the probe looks at: the address family and the descriptor.
  const socket = { localAddress: '127.0.0.1', _handle: { fd: 7 } } as unknown as net.Socket;
  const held = await probeOf(socket)();
  t.same(read, ['/proc/self/net/tcp'], 'the IPv4 table');
  return held;
}

t.test(
  "the probe reads tx_queue of the row whose inode column is its socket's",
  { skip: process.platform !== 'linux' && 'Linux only' },
  async (t) => {
    t.equal(
      await probedFromTable(t, '6949'),
      0x3a9f00,
      'row 1: the same digits as a uid and a timeout elsewhere do not count',
    );
    t.equal(await probedFromTable(t, '7001'), 0, 'nothing queued (rx_queue is not tx_queue)');
    t.equal(await probedFromTable(t, '1234'), 0);
    t.equal(await probedFromTable(t, '999'), null, 'no such socket');
    t.equal(await probedFromTable(t, '00'), null, 'digits that are no whole column');
  },
);

t.test('a real connection: the probe sees what the client has not taken, then 0', async (t) => {
  let serverSide!: net.Socket;
  const server = net.createServer((s) => (serverSide = s));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
  client.pause();
  await once(server, 'connection');
  t.teardown(() => {
    client.destroy();
    serverSide.destroy();
    server.close();
  });
  const probe = sendQueueProbe(serverSide);
  const written = 16 * 1024 * 1024;
  serverSide.write(Buffer.alloc(written, 'x'));
  await sleep(200);
  const held = await probe();
  if (process.platform !== 'linux') {
    t.equal(held, null, 'unknown outside Linux');
    return;
  }
  t.ok(held !== null && held > 64 * 1024 && held <= written, `the server's kernel holds ${held} unacknowledged bytes`);
  let received = 0;
  client.on('data', (d: Buffer) => (received += d.length));
  client.resume();
  while (received < written) await sleep(20);
  await sleep(100); // past the table cache, and the last acknowledgement
  t.equal(await probe(), 0, 'all acknowledged once the client read everything');
});
