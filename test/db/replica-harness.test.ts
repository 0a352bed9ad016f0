/**
 * The primary and hot standby the fleet tests run on (test/helpers/replica.ts): a row committed on
 * the primary reaches the standby, paused replay holds it back until resumed, and the standby
 * refuses writes.
 */
import t from 'tap';
import { startReplicaPair } from '../helpers/replica.js';

const pair = await startReplicaPair(t);

t.test('the standby is a hot standby of the primary', async (t) => {
  const [p] = await pair.primary.query(
    (sql) => sql`SELECT pg_is_in_recovery() AS r, system_identifier::text AS id FROM pg_control_system()`,
  );
  const [s] = await pair.standby.query(
    (sql) => sql`SELECT pg_is_in_recovery() AS r, system_identifier::text AS id FROM pg_control_system()`,
  );
  t.equal(p!.r, false, 'the primary is not in recovery');
  t.equal(s!.r, true, 'the standby is');
  t.equal(s!.id, p!.id, 'one system identifier: the standby was made from the primary');
  const err = await pair.standby.query((sql) => sql`CREATE TABLE nope (x int)`).catch((e: { code?: string }) => e);
  t.equal((err as { code?: string }).code, '25006', 'writes are refused on the standby (read-only transaction)');
});

t.test('a row committed on the primary is seen on the standby; paused replay holds the next one back', async (t) => {
  await pair.primary.query((sql) => sql`CREATE TABLE harness (id int PRIMARY KEY)`);
  await pair.primary.query((sql) => sql`INSERT INTO harness VALUES (1)`);
  await pair.waitForReplay();
  const seen = await pair.standby.query((sql) => sql<{ id: number }[]>`SELECT id FROM harness ORDER BY id`);
  t.same(
    seen.map((r) => r.id),
    [1],
  );

  await pair.pauseReplay();
  await pair.primary.query((sql) => sql`INSERT INTO harness VALUES (2)`);
  // Replay is paused, so waiting for it can only time out; the row must still be missing then.
  await t.rejects(pair.waitForReplay(500), /did not replay/);
  const held = await pair.standby.query((sql) => sql<{ id: number }[]>`SELECT id FROM harness ORDER BY id`);
  t.same(
    held.map((r) => r.id),
    [1],
    'the second row is held back',
  );

  await pair.resumeReplay();
  await pair.waitForReplay();
  const after = await pair.standby.query((sql) => sql<{ id: number }[]>`SELECT id FROM harness ORDER BY id`);
  t.same(
    after.map((r) => r.id),
    [1, 2],
    'and arrives once replay resumes',
  );
});

t.test('a stopped standby catches up after its restart', async (t) => {
  await pair.standby.stop();
  await pair.primary.query((sql) => sql`INSERT INTO harness VALUES (3)`);
  await pair.standby.start();
  await pair.waitForReplay();
  const rows = await pair.standby.query((sql) => sql<{ id: number }[]>`SELECT id FROM harness ORDER BY id`);
  t.same(
    rows.map((r) => r.id),
    [1, 2, 3],
  );
});

t.test('settings reload on the standby without a restart', async (t) => {
  await pair.standby.configure({ max_standby_streaming_delay: '0', hot_standby_feedback: 'on' });
  const rows = await pair.standby.query(
    (sql) => sql<{ name: string; setting: string }[]>`
    SELECT name, setting FROM pg_settings WHERE name IN ('max_standby_streaming_delay', 'hot_standby_feedback') ORDER BY name`,
  );
  t.same(
    rows.map((r) => `${r.name}=${r.setting}`),
    ['hot_standby_feedback=on', 'max_standby_streaming_delay=0'],
  );
});
