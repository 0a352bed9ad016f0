/**
 * The server's pools survive connections cut while they are being set up. postgres.js 3.4 reads
 * the array types of each new connection from a message handler and drops that query's promise,
 * so a cut during it was an unhandled rejection, which close-with-grace turns into a shutdown of
 * the whole server (found by test/faults/db-cut.test.ts under Node.js 24). The serving pools are
 * made with fetchTypes: false (src/db/connect.ts).
 */
import net from 'node:net';
import t, { type Test } from 'tap';
import { connect } from '../../src/db/connect.js';
import { recordUnhandledRejections } from '../helpers/crashes.js';
import { createTestDatabase } from '../helpers/db.js';
import { targetOf } from '../helpers/tcp-proxy.js';

/** A proxy to `target` that resets each connection once the server has sent it more than `cutAfter()` bytes. */
async function resettingProxy(
  t: Test,
  target: { host: string; port: number },
  cutAfter: () => number,
): Promise<number> {
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    const limit = cutAfter();
    let seen = 0;
    upstream.on('data', (d: Buffer) => {
      seen += d.length;
      if (seen > limit) {
        client.resetAndDestroy();
        upstream.destroy();
      } else client.write(d);
    });
    client.on('data', (d: Buffer) => upstream.write(d));
    client.on('error', () => {});
    upstream.on('error', () => {});
    client.on('close', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => server.close(resolve)));
  return (server.address() as net.AddressInfo).port;
}

t.test('connections cut at every point of their set-up leave no unhandled rejection (fetchTypes: false)', async (t) => {
  const db = await createTestDatabase(t);
  let limit = 0;
  const port = await resettingProxy(t, targetOf(db.url), () => limit);
  const url = new URL(db.url);
  url.host = `127.0.0.1:${port}`;
  const unhandled = recordUnhandledRejections(t);
  let failed = 0;
  // The server's first answers (authentication, parameters, ready, the query's rows) are a few
  // hundred bytes: cut after each possible amount.
  for (limit = 0; limit <= 1200; limit += 30) {
    const sql = connect(url.toString(), {
      max: 1,
      applicationName: 'kbx-test-connect',
      connectTimeoutS: 2,
      fetchTypes: false,
    });
    await sql`SELECT 1`.catch(() => failed++);
    await sql.end({ timeout: 0.2 }).catch(() => {});
  }
  await new Promise((r) => setTimeout(r, 200));
  t.ok(failed > 10, `cuts landed during set-up (${failed} of 41 connections failed)`);
  t.strictSame(unhandled, [], 'no rejection was left unhandled');
  limit = Number.MAX_SAFE_INTEGER;
  const sql = connect(url.toString(), { max: 1, applicationName: 'kbx-test-connect', fetchTypes: false });
  t.teardown(() => sql.end({ timeout: 1 }));
  const rows = await sql<{ one: number }[]>`SELECT 1 AS one`;
  t.equal(rows[0]?.one, 1, 'and the link works once nothing cuts it');
});
