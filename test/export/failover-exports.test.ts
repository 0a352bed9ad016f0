/**
 * Failover through the server (decisions.md D11.6, D11.7): the app on a multi-host DATABASE_URL
 * (the hot standby listed first, target_session_attrs=read-write) serves from the primary; when
 * the primary stops, the export in flight aborts; once the standby is promoted, the same app,
 * never restarted, serves whole exports again and /readyz is 200.
 */
import t from 'tap';
import { connect } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { rawGet, slowReader } from '../helpers/clients.js';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { call } from '../helpers/http.js';
import { startReplicaPair } from '../helpers/replica.js';

const MB = 1024 * 1024;
const pair = await startReplicaPair(t);
const { primary, standby } = pair;
const url = `postgres://postgres:${pair.password}@127.0.0.1:${standby.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=read-write`;
const sql = connect(url, { max: 4, applicationName: 'kbx-test', connectTimeoutS: 5 });
t.teardown(() => sql.end({ timeout: 1 }));
await migrate(sql);
await seed(sql, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2')]));
await seed(sql, simpleSeed([], { user: 'u2', slug: 'big' }));
await sql.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
  SELECT 'l' || i, 'b-u2', 'l' || i, 'Large ' || i, 'document', 'a' || i, 1, repeat('text of a large page ', ${Math.floor((2 * MB) / 21)})
  FROM generate_series(1, 8) i`);
await pair.waitForReplay();

t.test(
  'the primary stops and the standby is promoted: the export in flight aborts, the next ones are served',
  async (t) => {
    const server = await startServer(
      t,
      { EXPORT_CACHE_BYTES: '0', MIN_DRAIN_BYTES_PER_S: '0', DB_TIMEOUT_MS: '2000' },
      { name: 'postgres', url, sql },
    );
    const kb = `${server.url}/api/v1/open/books/kb/docs`;
    const first = await rawGet(kb, { authorization: 'Bearer kbx_u1' });
    t.ok(first.status === 200 && first.complete, 'served by the primary');

    const reader = slowReader(
      `${server.url}/api/v1/open/books/big/docs`,
      { authorization: 'Bearer kbx_u2' },
      256 * 1024,
    );
    t.teardown(() => reader.abort());
    for (const until = Date.now() + 10_000; reader.received < 64 * 1024 && Date.now() < until;)
      await new Promise((r) => setTimeout(r, 25));
    t.equal(reader.peek().status, 200, 'an export streams');
    await primary.stop();
    reader.setRate(Infinity);
    const cut = await reader.done;
    t.notOk(cut.complete, 'the export in flight on the old primary is aborted, never whole (D6.3)');

    await pair.promote();
    let served: Awaited<ReturnType<typeof rawGet>> | null = null;
    for (const until = Date.now() + 20_000; Date.now() < until;) {
      const res = await rawGet(kb, { authorization: 'Bearer kbx_u1' }, { deadlineMs: 10_000 });
      if (res.status === 200) {
        served = res;
        break;
      }
      t.equal(res.status, 503, 'until then, 503 (D8.5)');
      await new Promise((r) => setTimeout(r, 200));
    }
    t.ok(served?.complete, 'the promoted standby serves a whole export, without a restart');
    t.equal(served?.body.toString(), first.body.toString(), 'the same body as before the failover');
    const big = await rawGet(`${server.url}/api/v1/open/books/big/docs`, { authorization: 'Bearer kbx_u2' });
    t.ok(big.status === 200 && big.complete, 'and the large one, whole');
    let ready = 0;
    for (const until = Date.now() + 10_000; ready !== 200 && Date.now() < until;) {
      ready = (await call(server.url, '/readyz', { auth: null })).status;
      if (ready !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    t.equal(ready, 200, '/readyz follows the new primary (D11.7)');
    await sql`UPDATE documents SET name = 'After failover' WHERE id = 'd1'`;
    t.match(
      (await call(server.url, '/api/v1/open/books/kb/docs')).text,
      /After failover/,
      'writes on the new primary show in the next export',
    );
  },
);
