/**
 * The export's snapshot over a real PostgreSQL behind a TCP proxy (decisions.md D8.5): once the
 * snapshot fails, a statement still waiting for its answer fails with it at once, whether the
 * client went away while the link was frozen or the link was cut under it. Nothing waits for a
 * statement's own timeout.
 */
import t from 'tap';
import { connect } from '../../../src/db/connect.js';
import { isConnectionLost } from '../../../src/db/dependency.js';
import { inSnapshot, type SnapshotTimeouts } from '../../../src/export/snapshot/snapshot.js';
import { createTestDatabase } from '../../helpers/db.js';
import { startTcpProxy, targetOf } from '../../helpers/tcp-proxy.js';

const TIMEOUTS: SnapshotTimeouts = { startMs: 5000, fetchMs: 60_000, lockMs: 5000, idleInTransactionMs: 60_000 };
/** Far below a statement's own timeout (60 s here): what "at once" allows on a loaded machine. */
const AT_ONCE_MS = 3000;

const db = await createTestDatabase(t, { migrate: false });

/** How `p` settled within `ms`: its value or error, or 'still waiting'. */
function settledWithin(p: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise((resolve) => (timer = setTimeout(() => resolve('still waiting'), ms)));
  return Promise.race([
    p.then(
      (v) => ({ value: v }),
      (err: unknown) => err,
    ),
    late,
  ]).finally(() => clearTimeout(timer));
}

t.test(
  'the client goes while the link is frozen: the waiting statement fails with the snapshot, at once',
  async (t) => {
    const proxy = await startTcpProxy(t, targetOf(db.url));
    const sql = connect(proxy.urlFor(db.url), { max: 1, applicationName: 'kbx-test-snapshot' });
    t.teardown(() => sql.end({ timeout: 0 }));
    const gone = new AbortController();
    const reason = new Error('the client went away');
    let statement: Promise<unknown> | undefined;
    const snapshot = inSnapshot(
      sql,
      TIMEOUTS,
      async (snap) => {
        proxy.stall();
        statement = snap.query('SELECT 1', [], { timeoutMs: TIMEOUTS.fetchMs });
        gone.abort();
        return statement;
      },
      { signal: gone.signal, reason: () => reason },
    );
    t.equal(
      await snapshot.then(
        () => null,
        (err: unknown) => err,
      ),
      reason,
      'the snapshot fails with the reason',
    );
    t.ok(statement, 'the statement was sent');
    t.equal(await settledWithin(statement!, AT_ONCE_MS), reason, 'the waiting statement fails with the same reason');
    proxy.resume();
  },
);

t.test('the link is cut mid-answer: the statement queued behind it fails too, at once', async (t) => {
  const proxy = await startTcpProxy(t, targetOf(db.url));
  const sql = connect(proxy.urlFor(db.url), { max: 1, applicationName: 'kbx-test-snapshot' });
  t.teardown(() => sql.end({ timeout: 0 }));
  const statements: Promise<unknown>[] = [];
  const snapshot = inSnapshot(sql, TIMEOUTS, async (snap) => {
    // postgres.js describes a statement with parameters before it runs it, and holds the
    // transaction's next statements in a queue of its own meanwhile; a lost connection never
    // answers that queue. The export sends its plan reads (with parameters) and FETCHes this way.
    proxy.cutAfter(50_000);
    statements.push(snap.query('SELECT repeat($1::text, 1000000)', ['x'], { raw: true, timeoutMs: TIMEOUTS.fetchMs }));
    statements.push(snap.query('SELECT 2', [], { raw: true, timeoutMs: TIMEOUTS.fetchMs }));
    for (const s of statements) s.catch(() => {});
    return Promise.all(statements);
  });
  const failure = await settledWithin(snapshot, AT_ONCE_MS);
  t.ok(
    isConnectionLost(failure),
    `the snapshot fails with the lost connection: ${String((failure as Error)?.message ?? failure)}`,
  );
  for (const [i, s] of statements.entries()) {
    const outcome = await settledWithin(s, AT_ONCE_MS);
    t.ok(outcome instanceof Error, `statement ${i + 1} failed: ${String((outcome as Error)?.message ?? outcome)}`);
  }
});
