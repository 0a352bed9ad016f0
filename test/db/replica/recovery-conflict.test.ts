/**
 * Telling a hot standby's recovery conflict (decisions.md D11.5) from other failures: the errors
 * PostgreSQL sends for one (a cancelled statement, a terminated session), not the serialisation
 * failures of read-write transactions on a primary, and a standby's conflict count, read on a real
 * standby (test/helpers/replica.ts) and null when the server does not answer.
 */
import t from 'tap';
import { connect } from '../../../src/db/connect.js';
import { asDatabaseOutage, isRecoveryConflict } from '../../../src/db/dependency.js';
import { conflictsSoFar } from '../../../src/db/replica/recovery-conflict.js';
import { DependencyError } from '../../../src/errors.js';
import { freePort } from '../../../src/db/free-port.js';
import { startReplicaPair } from '../../helpers/replica.js';

const cancelled = { code: '40001', severity: 'ERROR', message: 'canceling statement due to conflict with recovery' };
const terminated = { code: '40001', severity: 'FATAL', message: 'terminating connection due to conflict with recovery' };
const bufferPin = { code: '40P01', severity: 'ERROR', message: 'canceling statement due to conflict with recovery' };

t.test('the errors of a recovery conflict, and not others', async (t) => {
  for (const err of [cancelled, terminated, bufferPin]) t.ok(isRecoveryConflict(err), `${err.code} ${err.message}`);
  t.notOk(isRecoveryConflict({ code: '40001', message: 'could not serialize access due to concurrent update' }), "a primary's serialisation failure");
  t.notOk(isRecoveryConflict({ code: '40P01', message: 'deadlock detected' }), 'a deadlock');
  t.notOk(isRecoveryConflict({ code: '57014', message: 'canceling statement due to statement timeout' }), 'a statement timeout');
  t.notOk(isRecoveryConflict(null));
  t.notOk(isRecoveryConflict('conflict with recovery'));
});

t.test('before the first byte a recovery conflict is an outage of the replica: 503, retried', async (t) => {
  const outage = asDatabaseOutage(cancelled);
  t.ok(outage instanceof DependencyError);
  t.equal(outage?.dependency, 'replica');
});

t.test("a standby's conflict count, and null from a server that does not answer", async (t) => {
  const pair = await startReplicaPair(t);
  const standby = connect(pair.standby.url, { max: 1, applicationName: 'kbx-test', fetchTypes: false });
  t.teardown(() => standby.end({ timeout: 1 }));
  t.equal(await conflictsSoFar(standby, 5000), 0n, 'none yet');
  const nowhere = connect(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`, { max: 1, applicationName: 'kbx-test', connectTimeoutS: 1, fetchTypes: false });
  t.teardown(() => nowhere.end({ timeout: 1 }));
  t.equal(await conflictsSoFar(nowhere, 2000), null);
});
