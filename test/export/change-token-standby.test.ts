/**
 * Change tokens and deltas on a real hot standby (decisions.md D11.2, D12.3, D12.7;
 * test/helpers/replica.ts). A standby's pg_current_snapshot() lists no running transactions, so a
 * token taken there as it reads would call a writer that was running "visible" and its change would
 * never be in a delta. The token names instead the writers of the book it saw; a standby behind a
 * token passes it to the primary.
 */
import t from 'tap';
import postgres from 'postgres';
import { migrate } from '../../src/db/migrate.js';
import { ChangeTokens, loadChangeTokenSecret, StandbyBehindTokenError } from '../../src/export/change-token.js';
import { readChangeState, type ChangeState } from '../../src/export/change-state.js';
import { changedDocumentQuery, sinceParams, type ChangeSince } from '../../src/export/snapshot/changes-query.js';
import { documentIdOf, type DocumentRow } from '../../src/export/snapshot/rows.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { startReplicaPair, type PgNode } from '../helpers/replica.js';

const pair = await startReplicaPair(t);
const OPTS = { excludeCategories: true, includeContentHtml: true };
const BOOK = 'b-u1';

const primary = postgres(pair.primary.url, { max: 4, onnotice: () => {} });
t.teardown(() => primary.end({ timeout: 1 }));
await migrate(primary);
await seed(primary, simpleSeed([doc('d1', 'a1'), doc('d2', 'a2')]));
const tokens = new ChangeTokens({
  secret: await loadChangeTokenSecret(primary),
  retentionDays: 30,
  mediaProxyPrefix: '/media/',
  outputFormat: '1',
});

/** The change state and the changed ids since `since` (when given), in one snapshot of `node`. */
async function readOn(node: PgNode, since?: ChangeSince): Promise<{ state: ChangeState; changed: string[] }> {
  return node.query((sql) =>
    sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => {
      const state = await readChangeState((text, params) => tx.unsafe(text, params) as never, BOOK);
      if (since === undefined) return { state, changed: [] };
      const rows = (await tx
        .unsafe(changedDocumentQuery(OPTS), [BOOK, ...sinceParams(since)])
        .raw()) as unknown as DocumentRow[];
      return { state, changed: rows.map(documentIdOf) };
    }),
  );
}

/** Waits until the standby has replayed everything the primary has written so far (flushed or not). */
async function replayed(): Promise<void> {
  await primary`SELECT pg_switch_wal()`;
  await pair.waitForReplay();
}

t.test('a token taken on the standby while a writer runs still sees that writer in the next delta', async (t) => {
  // The slow writer takes its id first; a later one commits before the standby's snapshot.
  const slow = await primary.reserve();
  t.teardown(() => slow.release());
  await slow`BEGIN`;
  const [{ x }] = (await slow`SELECT pg_current_xact_id()::text AS x`) as unknown as [{ x: string }];
  await primary`UPDATE documents SET name = 'fast' WHERE id = 'd2'`;
  await replayed();

  const { state } = await readOn(pair.standby);
  t.equal(state.inRecovery, true);
  const [xmin, xmax, xip] = state.snapshot.split(':');
  t.equal(xip, '', "the standby's pg_current_snapshot() lists no running transaction");
  t.ok(
    BigInt(xmin!) <= BigInt(x) && BigInt(x) < BigInt(xmax!),
    `although the slow writer ${x} runs within ${state.snapshot}`,
  );
  const token = tokens.issue(state, OPTS);

  await slow`UPDATE documents SET name = 'late' WHERE id = 'd1'`;
  await slow`COMMIT`;
  await replayed();
  const later = await readOn(pair.standby);
  const since = tokens.accept(token, later.state, OPTS);
  t.equal(since.snapshot, `${xmin}:${xmin}:`, 'unseen from xmin on…');
  t.notMatch(since.visible, new RegExp(`\\b${x}\\b`), '…but for the writers it saw, which the slow one is not');
  t.same(
    (await readOn(pair.standby, since)).changed,
    ['d1'],
    'the slow writer is in the delta read on the standby, and the fast one it saw is not',
  );
  t.same(
    (await readOn(pair.standby, { snapshot: state.snapshot, visible: '{}' })).changed,
    [],
    'the raw standby snapshot would have lost it for good',
  );
  const onPrimary = await readOn(pair.primary);
  t.same(tokens.accept(token, onPrimary.state, OPTS), since, 'the primary reads the token the same way');
  t.same((await readOn(pair.primary, since)).changed, ['d1'], 'and gives the same delta');
});

t.test('a standby behind the token passes it on, never a 410; once it caught up, it answers', async (t) => {
  await pair.pauseReplay();
  t.teardown(() => pair.resumeReplay());
  await primary`UPDATE documents SET name = 'newer' WHERE id = 'd2'`;
  await primary`UPDATE documents SET name = 'newest' WHERE id = 'd2'`;
  const token = tokens.issue((await readOn(pair.primary)).state, OPTS);
  const behind = await readOn(pair.standby);
  let refused: unknown;
  try {
    tokens.accept(token, behind.state, OPTS);
  } catch (err) {
    refused = err;
  }
  t.ok(
    refused instanceof StandbyBehindTokenError,
    'the standby has not replayed what the token saw: the primary answers',
  );
  await pair.resumeReplay();
  await replayed();
  await primary`UPDATE documents SET name = 'after' WHERE id = 'd1'`;
  await replayed();
  const caught = await readOn(pair.standby);
  const since = tokens.accept(token, caught.state, OPTS);
  t.same((await readOn(pair.standby, since)).changed, ['d1'], 'the change after the token, and not the ones it saw');
});
