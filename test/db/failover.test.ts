/**
 * Failover (decisions.md D11.6): a multi-host DATABASE_URL with target_session_attrs=read-write is
 * accepted by loadConfig, and a pool from connect() follows the primary: it never settles on the
 * hot standby (listed first here on purpose), a query in flight on the old primary fails as a lost
 * connection when it stops, and once the standby is promoted the same pool serves from it, without
 * a restart.
 */
import t from 'tap';
import { loadConfig } from '../../src/config.js';
import { connect } from '../../src/db/connect.js';
import { isConnectionLost } from '../../src/db/dependency.js';
import { startReplicaPair } from '../helpers/replica.js';

const pair = await startReplicaPair(t);
const { primary, standby } = pair;

const config = loadConfig({
  DATABASE_URL: `postgres://postgres:${pair.password}@127.0.0.1:${standby.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=read-write`,
});
const sql = connect(config.databaseUrl!, {
  max: 2,
  applicationName: 'kbx-test-failover',
  connectTimeoutS: 5,
  fetchTypes: false,
});
t.teardown(() => sql.end({ timeout: 1 }));

const server = async () => {
  const [row] = await sql<
    { port: number; recovery: boolean }[]
  >`SELECT inet_server_port() AS port, pg_is_in_recovery() AS recovery`;
  return row!;
};

t.test('the pool connects to the primary, not to the standby listed before it', async (t) => {
  for (let i = 0; i < 3; i++) t.same(await server(), { port: primary.port, recovery: false });
  await sql`CREATE TABLE failover (id int PRIMARY KEY)`;
  await sql`INSERT INTO failover VALUES (1)`;
});

t.test(
  'the primary stops, the standby is promoted: in-flight work fails, the next is served by the new primary',
  async (t) => {
    await pair.waitForReplay();
    const inFlight = sql`SELECT pg_sleep(30)`.then(
      () => null,
      (err: unknown) => err,
    );
    // The sleep has started once the server lists it.
    await primary.query(async (admin) => {
      while ((await admin`SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'`).length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    });
    await primary.stop();
    const err = await inFlight;
    t.ok(
      err !== null && isConnectionLost(err),
      `the in-flight query failed as a lost connection (${(err as { code?: string } | null)?.code})`,
    );

    // No host is a primary now: postgres.js keeps trying the hosts, so the query waits for one.
    const waiting = server();
    await pair.promote();
    t.same(
      await waiting,
      { port: standby.port, recovery: false },
      'a query sent before the promotion is answered by the promoted server',
    );
    t.same(await server(), { port: standby.port, recovery: false });
    await sql`INSERT INTO failover VALUES (2)`;
    const rows = await sql<{ id: number }[]>`SELECT id FROM failover ORDER BY id`;
    t.same(
      rows.map((r) => r.id),
      [1, 2],
      'the new primary has the rows of the old one and takes writes',
    );
  },
);
