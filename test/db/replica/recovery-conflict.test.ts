/**
 * Telling a hot standby's recovery conflict (decisions.md D11.5) from other failures by its SQLSTATE
 * and the server it came from, never by its message: 40001 and 40P01 from a standby's connection
 * are conflicts in any language, the same codes from the primary never are. A real conflict on a
 * real standby (test/helpers/replica.ts) whose session speaks another lc_messages; a real
 * serialisation failure on the primary; and the standby's conflict count, null from a server that
 * does not answer.
 */
import t from 'tap';
import postgres from 'postgres';
import { connect } from '../../../src/db/connect.js';
import { asDatabaseOutage, isRecoveryConflict } from '../../../src/db/dependency.js';
import { conflictsSoFar } from '../../../src/db/replica/recovery-conflict.js';
import { DependencyError } from '../../../src/errors.js';
import { freePort } from '../../../src/db/free-port.js';
import { startReplicaPair } from '../../helpers/replica.js';

const cancelled = { code: '40001', severity: 'ERROR', message: 'canceling statement due to conflict with recovery' };
const terminated = {
  code: '40001',
  severity: 'FATAL',
  message: 'terminating connection due to conflict with recovery',
};
const bufferPin = { code: '40P01', severity: 'ERROR', message: 'canceling statement due to conflict with recovery' };
// PostgreSQL's own translations (its de, fr and ja message catalogs).
const translated = [
  { code: '40001', severity: 'ERROR', message: 'storniere Anfrage wegen Konflikt mit der Wiederherstellung' },
  { code: '40001', severity: 'FATAL', message: 'Verbindung wird abgebrochen wegen Konflikt mit der Wiederherstellung' },
  { code: '40001', severity: 'ERROR', message: "annulation de la requête à cause d'un conflit avec la restauration" },
  { code: '40P01', severity: 'ERROR', message: 'リカバリで競合が発生したためステートメントをキャンセルしています' },
];

t.test('40001 and 40P01 from a standby are recovery conflicts in any language; from the primary never', async (t) => {
  for (const err of [cancelled, terminated, bufferPin, ...translated]) {
    t.ok(isRecoveryConflict(err, true), `from a standby: ${err.code} ${err.message}`);
    t.notOk(isRecoveryConflict(err, false), `from the primary: ${err.code} ${err.message}`);
  }
  // On a standby the code is the whole story: its read-only snapshots cannot fail otherwise.
  t.ok(
    isRecoveryConflict(
      { code: '40001', message: 'konnte Zugriff nicht serialisieren wegen gleichzeitiger Aktualisierung' },
      true,
    ),
  );
  t.notOk(
    isRecoveryConflict({ code: '40001', message: 'could not serialize access due to concurrent update' }, false),
    "a primary's serialisation failure",
  );
  t.notOk(isRecoveryConflict({ code: '40P01', message: 'deadlock detected' }, false), "a primary's deadlock");
  t.notOk(
    isRecoveryConflict({ code: '57014', message: 'canceling statement due to conflict with recovery' }, true),
    'another code, whatever its message',
  );
  t.notOk(isRecoveryConflict({ message: 'canceling statement due to conflict with recovery' }, true), 'no code');
  t.notOk(isRecoveryConflict(null, true));
  t.notOk(isRecoveryConflict('40001', true));
});

t.test('before the first byte a recovery conflict is an outage of the replica: 503, retried', async (t) => {
  for (const err of [cancelled, translated[0]!]) {
    const outage = asDatabaseOutage(err, true);
    t.ok(outage instanceof DependencyError, err.message);
    t.equal(outage?.dependency, 'replica');
  }
  t.equal(asDatabaseOutage(cancelled, false), undefined, "the primary's 40001 is no outage: a 500, logged");
  t.equal(asDatabaseOutage(terminated, false)?.dependency, 'database', 'a FATAL on the primary is a lost connection');
});

const pair = await startReplicaPair(t, {
  standbySettings: { max_standby_streaming_delay: 0, hot_standby_feedback: 'off' },
  messagesLocale: true,
});
const standby = connect(pair.standby.url, { max: 1, applicationName: 'kbx-test', fetchTypes: false });
t.teardown(() => standby.end({ timeout: 1 }));

t.test("a standby's conflict count, and null from a server that does not answer", async (t) => {
  t.equal(await conflictsSoFar(standby, 5000), 0n, 'none yet');
  const nowhere = connect(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`, {
    max: 1,
    applicationName: 'kbx-test',
    connectTimeoutS: 1,
    fetchTypes: false,
  });
  t.teardown(() => nowhere.end({ timeout: 1 }));
  t.equal(await conflictsSoFar(nowhere, 2000), null);
});

t.test('a real conflict on the standby under another lc_messages: told by its SQLSTATE there', async (t) => {
  const primary = postgres(pair.primary.url, { max: 2, onnotice: () => {} });
  t.teardown(() => primary.end({ timeout: 1 }));
  await primary`CREATE TABLE conflicted (id int PRIMARY KEY, v text)`;
  await primary`INSERT INTO conflicted SELECT i, 'row ' || i FROM generate_series(1, 1000) i`;
  await pair.waitForReplay();

  // A session of its own: it speaks the other locale, holds a snapshot and runs a long statement in it.
  const reader = postgres(pair.standby.url, { max: 1, onnotice: () => {} });
  t.teardown(() => reader.end({ timeout: 1 }));
  const session = await reader.reserve();
  await session.unsafe(`SET lc_messages = '${pair.messagesLocale}'`);
  const [shown] = await session<{ lc_messages: string }[]>`SHOW lc_messages`;
  t.equal(shown!.lc_messages, pair.messagesLocale, `the session's lc_messages is ${pair.messagesLocale}`);
  t.not(pair.messagesLocale, 'C');
  await session`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`;
  await session`SELECT count(*) FROM conflicted`;
  const sleeping = session`SELECT pg_sleep(60)`.then(
    () => null,
    (err: unknown) => err,
  );

  // Another snapshot on the primary (autovacuum's) can keep VACUUM from removing the old rows:
  // update and vacuum until the standby cancels.
  const before = (await conflictsSoFar(standby, 5000))!;
  let err: unknown = null;
  for (let round = 0; round < 20 && err === null; round++) {
    await primary`UPDATE conflicted SET v = v || ' (edited)'`;
    await primary`VACUUM conflicted`;
    err = await Promise.race([sleeping, new Promise((r) => setTimeout(() => r(null), 500))]);
  }
  session.release();
  // The session reports its statistics, the conflict count with them, when it ends.
  await reader.end({ timeout: 1 });
  t.match(err, { code: '40001' }, 'the standby cancelled the statement');
  t.comment(`its message under lc_messages=${pair.messagesLocale}: ${(err as Error).message}`);
  t.ok(isRecoveryConflict(err, true), 'a recovery conflict: the code, from a standby');
  t.notOk(isRecoveryConflict(err, false), 'the same error is none if the primary had sent it');
  t.equal(asDatabaseOutage(err, true)?.dependency, 'replica');
  let after = before;
  for (
    const until = Date.now() + 10_000;
    after === before && Date.now() < until;
    await new Promise((r) => setTimeout(r, 50))
  ) {
    after = (await conflictsSoFar(standby, 5000))!;
  }
  t.ok(after > before, 'the standby counted it');
});

t.test('a real serialisation failure on the primary is no recovery conflict', async (t) => {
  const a = postgres(pair.primary.url, { max: 1, onnotice: () => {} });
  const b = postgres(pair.primary.url, { max: 1, onnotice: () => {} });
  t.teardown(() => Promise.all([a.end({ timeout: 1 }), b.end({ timeout: 1 })]));
  await a`CREATE TABLE contended (id int PRIMARY KEY, v int)`;
  await a`INSERT INTO contended VALUES (1, 0)`;
  const err = await a
    .begin('ISOLATION LEVEL REPEATABLE READ', async (tx) => {
      await tx`SELECT v FROM contended WHERE id = 1`;
      await b`UPDATE contended SET v = v + 1 WHERE id = 1`;
      await tx`UPDATE contended SET v = v + 1 WHERE id = 1`;
    })
    .then(
      () => null,
      (e: unknown) => e,
    );
  t.match(err, { code: '40001' });
  t.notOk(isRecoveryConflict(err, false));
  t.equal(asDatabaseOutage(err, false), undefined, 'not an outage either');
});
