/**
 * A recovery conflict on a real hot standby (decisions.md D11.5): with max_standby_streaming_delay=0
 * and no hot_standby_feedback, rows updated and vacuumed on the primary while a slow export reads
 * them on the standby make the standby cancel the export. The body is aborted, never whole; the
 * export log and metrics give the cause; the next export is whole. The service's sessions run with
 * lc_messages in another locale: the cause is told by SQLSTATE, not by the message's words.
 */
import t from 'tap';
import { connect, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { rawGet, slowReader } from '../helpers/clients.js';
import { seed, simpleSeed } from '../helpers/app.js';
import { startLoggedServer } from '../helpers/logged-app.js';
import { call } from '../helpers/http.js';
import { startReplicaPair } from '../helpers/replica.js';

const MB = 1024 * 1024;
const pair = await startReplicaPair(t, {
  standbySettings: { max_standby_streaming_delay: 0, hot_standby_feedback: 'off' },
  messagesLocale: true,
});
const primary: Sql = connect(pair.primary.url, { max: 2, applicationName: 'kbx-test' });
t.teardown(() => primary.end({ timeout: 1 }));
const standby: Sql = connect(pair.standby.url, { max: 1, applicationName: 'kbx-test' });
t.teardown(() => standby.end({ timeout: 1 }));
/** Sessions the standby has cancelled for a snapshot replay needed (PostgreSQL counts them at their end). */
const snapshotConflicts = async () =>
  (
    await standby<
      { n: number }[]
    >`SELECT confl_snapshot::int AS n FROM pg_stat_database_conflicts WHERE datname = current_database()`
  )[0]!.n;
await migrate(primary);
// Every session opened from now on, the service's on the standby included (the setting replicates).
await primary.unsafe(`ALTER DATABASE postgres SET lc_messages = '${pair.messagesLocale}'`);
await seed(primary, simpleSeed([]));
await primary.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str)
  SELECT 'l' || i, 'b-u1', 'l' || i, 'Large ' || i, 'document', 'a' || i, 1, repeat('text of a large page ', ${Math.floor((2 * MB) / 21)})
  FROM generate_series(1, 8) i`);
await pair.waitForReplay();

t.test(
  'the standby cancels a slow export to replay a vacuum: aborted, logged and counted; the next export is whole',
  async (t) => {
    const server = await startLoggedServer(t, pair.primary.url, {
      DATABASE_REPLICA_URL: pair.standby.url,
      REPLICA_CHECK_INTERVAL_MS: '100',
      EXPORT_CACHE_BYTES: '0',
      MIN_DRAIN_BYTES_PER_S: '0',
      LOG_LEVEL: 'info',
    });
    const url = `${server.url}/api/v1/open/books/kb/docs`;
    const auth = { authorization: 'Bearer kbx_u1' };
    const [locale] = await pair.standby.query((sql) => sql<{ lc_messages: string }[]>`SHOW lc_messages`);
    t.equal(locale!.lc_messages, pair.messagesLocale, `sessions on the standby speak ${pair.messagesLocale}`);
    const reader = slowReader(url, auth, 256 * 1024);
    t.teardown(() => reader.abort());
    const deadline = Date.now() + 10_000;
    while (reader.received < 64 * 1024 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    t.equal(reader.peek().status, 200, 'the export streams from the standby');

    // Another snapshot on the primary (an autovacuum worker's, say) can keep VACUUM from
    // removing the old rows, and then nothing conflicts: update and vacuum until the standby cancels.
    // Each time the cleanup is replayed before the reader speeds up, or a fast machine could finish
    // the export before the standby gets to it.
    const before = await snapshotConflicts();
    for (let round = 0; round < 10 && (await snapshotConflicts()) === before; round++) {
      await primary`UPDATE documents SET name = name || ' (edited)' WHERE book_id = 'b-u1'`;
      await primary`VACUUM documents`;
      await pair.waitForReplay();
      for (const until = Date.now() + 1000; (await snapshotConflicts()) === before && Date.now() < until;)
        await new Promise((r) => setTimeout(r, 25));
    }
    t.ok((await snapshotConflicts()) > before, 'the standby cancelled a session to replay the cleanup');
    reader.setRate(Infinity);
    const res = await reader.done;
    t.equal(res.status, 200);
    t.notOk(res.complete, 'the body never got its terminating chunk (D6.3)');

    // The export's end is logged once its cause is known, which may be after the client saw the cut.
    const ended = async () => server.logs.find((l) => l.msg === 'export ended' && l.outcome === 'failed');
    for (const until = Date.now() + 5000; !(await ended()) && Date.now() < until;)
      await new Promise((r) => setTimeout(r, 25));
    t.match(
      await ended(),
      { source: 'replica 0', cause: 'recovery_conflict', reason: 'recovery_conflict' },
      'the export log names the cause',
    );
    const metrics = (await call(server.url, '/metrics', { auth: null })).text;
    t.match(metrics, /kb_export_export_failures_total\{cause="recovery_conflict"\} 1\b/, 'and so do the metrics');

    const next = await rawGet(url, auth);
    t.equal(next.status, 200);
    t.ok(next.complete, 'the next export is whole');
    t.match(next.body.subarray(-40).toString(), /"meta":\{"count":8\}\}$/);
    t.match(next.body.subarray(0, 4096).toString(), /\(edited\)/, 'with the edits replayed');
  },
);
