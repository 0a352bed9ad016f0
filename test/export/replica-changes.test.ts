/**
 * Deltas across a fleet on a real primary and hot standby (decisions.md D12.7, D12.8;
 * test/helpers/replica.ts): a token the standby has not replayed is answered by the primary, with
 * the primary's bytes and ETag, never a 410 nor a stale merge; once caught up the standby gives the
 * same bytes; a token issued while 2,000 transactions ran is short and exact wherever it is read; a
 * standby promoted after losing transactions answers older tokens 410, and `kb-export changes` says
 * what to do.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { connect, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';
import { MAX_TOKEN_CHARS } from '../../src/export/change-token.js';
import { doc, seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { call } from '../helpers/http.js';
import { startReplicaPair } from '../helpers/replica.js';

const WRITERS = 2000;
const pair = await startReplicaPair(t, { settings: { max_prepared_transactions: WRITERS + 10 } });
const primary: Sql = connect(pair.primary.url, { max: 4, applicationName: 'kbx-test' });
t.teardown(() => primary.end({ timeout: 1 }));
await migrate(primary);
await seed(
  primary,
  simpleSeed([
    doc('d1', 'a1'),
    doc('d2', 'a2'),
    doc('d3', 'a3'),
    ...Array.from({ length: 50 }, (_, i) => doc(`w${i}`, `b${i}`)),
  ]),
);
await pair.waitForReplay();
const db = { name: 'postgres', url: pair.primary.url, sql: primary };

const common = { EXPORT_CACHE_BYTES: '0', MIN_DRAIN_BYTES_PER_S: '0' };
/** Reads the primary only. */
const direct = await startServer(t, common, db);
/** Reads the standby while its lag is under a minute (a paused standby stays usable). */
const fleet = await startServer(
  t,
  { ...common, DATABASE_REPLICA_URL: pair.standby.url, REPLICA_MAX_LAG_MS: '60000', REPLICA_CHECK_INTERVAL_MS: '100' },
  db,
);

const KB = '/api/v1/open/books/kb/docs';

async function get(server: TestServer, query = '', method: 'GET' | 'HEAD' = 'GET') {
  const res = await request(`${server.url}${KB}${query}`, { method, headers: { authorization: 'Bearer kbx_u1' } });
  const text = await res.body.text();
  return {
    status: res.statusCode,
    text,
    etag: res.headers.etag as string,
    token: res.headers['export-change-token'] as string,
  };
}

const ids = (text: string) => (JSON.parse(text) as { documents: { id: string }[] }).documents.map((d) => d.id);

/** The fleet server's counter `name{labels}`, 0 when absent. */
async function counter(name: string, labels: string): Promise<number> {
  const m = new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(
    (await call(fleet.url, '/metrics', { auth: null })).text,
  );
  return m ? Number(m[1]) : 0;
}
const behindToken = () => counter('kb_export_replica_fallbacks_total', 'reason="behind_token"');
const standbyExports = () => counter('kb_export_replica_exports_total', 'standby="0"');

/** Writes nothing until the primary's WAL up to now is replayed, and RUNNING_XACTS shows no writer. */
async function replayed(): Promise<void> {
  await primary`SELECT pg_switch_wal()`;
  await pair.waitForReplay();
}

t.test('a token the standby has not replayed: the primary answers, with its bytes and ETag (D12.7)', async (t) => {
  await replayed();
  await pair.pauseReplay();
  t.teardown(() => pair.resumeReplay());
  await primary`UPDATE documents SET name = 'changed before the token' WHERE id = 'd2'`;
  await primary`INSERT INTO documents (id, book_id, slug, name, type, order_key, status) VALUES ('f1', 'b-u1', 'f1', 'F', 'document', 'a4', 1)`;
  const full = await get(direct);
  t.ok(ids(full.text).includes('f1'), 'the token saw the new document');
  await primary`UPDATE documents SET name = 'changed after the token' WHERE id = 'd3'`;

  const fallbacks = await behindToken();
  const fromFleet = await get(fleet, `?changedSince=${full.token}`);
  const fromPrimary = await get(direct, `?changedSince=${full.token}`);
  t.equal(fromFleet.status, 200, 'never 410 for a standby behind the token');
  t.same(
    ids(fromFleet.text),
    ['d3'],
    'the change after the token only: not d2 at its older version, and f1 is not forgotten',
  );
  t.equal(fromFleet.text, fromPrimary.text, "the primary's delta, byte for byte");
  t.equal(fromFleet.etag, fromPrimary.etag, 'and its ETag');
  t.equal(await behindToken(), fallbacks + 1, 'counted as a fallback for the token');
  const head = await get(fleet, `?changedSince=${full.token}`, 'HEAD');
  t.match(head, { status: 200, etag: fromPrimary.etag }, 'HEAD reads the primary too');
  const afterHead = await behindToken();
  t.equal(afterHead, fallbacks + 2, 'counted too');

  await pair.resumeReplay();
  await replayed();
  const exports = await standbyExports();
  const caughtUp = await get(fleet, `?changedSince=${full.token}`);
  t.equal(await standbyExports(), exports + 1, 'the standby, caught up, answers it');
  t.equal(await behindToken(), afterHead, 'with no fallback');
  t.equal(caughtUp.text, fromPrimary.text, 'with the same bytes');
  t.equal(caughtUp.etag, fromPrimary.etag, 'under the same ETag');

  const resume = '?afterOrderKey=a2&afterId=d2';
  const resumedExports = await standbyExports();
  const resumed = await get(fleet, resume);
  t.equal(await standbyExports(), resumedExports + 1, 'a resumed export (D13.1) reads the standby too');
  t.same(ids(resumed.text).slice(0, 2), ['d3', 'f1'], 'the documents after the position');
  t.equal(ids(resumed.text).length, 52);
  t.equal(resumed.text, (await get(direct, resume)).text, "the primary's bytes");
});

t.test(
  `a token issued while ${WRITERS} transactions ran is short and exact, on the primary and on the standby (D12.8)`,
  async (t) => {
    await replayed();
    // Prepared transactions keep their xids running without a connection each. Writers of one book
    // queue on its row (its export version), so one of them writes the book, the others take an xid.
    const writers = await primary.reserve();
    t.teardown(() => writers.release());
    const BOOK_WRITER = WRITERS / 2;
    for (let i = 0; i < WRITERS; i++) {
      if (i === BOOK_WRITER) {
        // Committed while the first half runs, so between the token's xmin and xmax, and seen by it.
        await primary`UPDATE documents SET name = 'seen' WHERE id IN ('d1', 'd2')`;
      }
      await writers`BEGIN`;
      if (i === BOOK_WRITER)
        await writers`UPDATE documents SET name = 'by a writer running at the export' WHERE id LIKE 'w%'`;
      else await writers`SELECT pg_current_xact_id()`;
      await writers.unsafe(`PREPARE TRANSACTION 'w${i}'`);
    }
    const finish = async (commit: (i: number) => boolean) => {
      for (let i = 0; i < WRITERS; i++) await writers.unsafe(`${commit(i) ? 'COMMIT' : 'ROLLBACK'} PREPARED 'w${i}'`);
    };
    t.teardown(() => finish(() => false).catch(() => {}));
    // A transaction that completes after all of them: they are below every snapshot's xmax now.
    await primary`SELECT pg_current_xact_id()`;
    await replayed();
    const [{ running }] =
      (await primary`SELECT count(*)::int AS running FROM pg_snapshot_xip(pg_current_snapshot())`) as unknown as [
        { running: number },
      ];
    const [{ prepared }] = (await primary`SELECT count(*)::int AS prepared FROM pg_prepared_xacts`) as unknown as [
      { prepared: number },
    ];
    t.ok(running >= WRITERS, `${running} transactions running, ${prepared} prepared`);

    const onPrimary = await get(direct);
    const onStandby = await get(fleet);
    for (const [where, token] of [
      ['primary', onPrimary.token],
      ['standby', onStandby.token],
    ]) {
      t.ok(
        token!.length < 200,
        `issued on the ${where}: ${token!.length} characters (the limit is ${MAX_TOKEN_CHARS})`,
      );
    }
    t.equal(onStandby.text, onPrimary.text, 'the standby had replayed the same data');

    await finish((i) => i === BOOK_WRITER);
    await replayed();
    const expected = Array.from({ length: 50 }, (_, i) => `w${i}`).sort();
    for (const [where, token] of [
      ['primary', onPrimary.token],
      ['standby', onStandby.token],
    ]) {
      const fromPrimary = await get(direct, `?changedSince=${token}`);
      const fromFleet = await get(fleet, `?changedSince=${token}`);
      t.equal(fromPrimary.status, 200, `the ${where}'s token is accepted by the primary`);
      t.same(
        ids(fromPrimary.text).sort(),
        expected,
        `issued on the ${where}: exactly the 50 documents the running writer changed, not d1 or d2 (seen)`,
      );
      t.equal(fromFleet.text, fromPrimary.text, `issued on the ${where}: the same delta from the fleet`);
    }
  },
);

t.test(
  'a standby promoted after losing transactions answers older tokens 410, and `changes` says what to do (D12.8)',
  async (t) => {
    await replayed();
    const before = await get(direct);
    await pair.standby.stop();
    await primary`UPDATE documents SET name = 'lost in the failover' WHERE id = 'd1'`;
    const lost = await get(direct);
    t.match(lost.text, /lost in the failover/, 'a token whose snapshot saw a transaction the standby never received');
    await pair.primary.stop();
    await pair.standby.start();
    await pair.promote();

    const promoted: Sql = connect(pair.standby.url, { max: 2, applicationName: 'kbx-test' });
    t.teardown(() => promoted.end({ timeout: 1 }));
    const server = await startServer(t, common, { name: 'postgres', url: pair.standby.url, sql: promoted });
    for (const [what, token] of [
      ['saw the lost transaction', lost.token],
      ['was issued before it', before.token],
    ]) {
      const r = await get(server, `?changedSince=${token}`);
      t.equal(r.status, 410, `a token that ${what}`);
      t.match(JSON.parse(r.text), {
        code: 'CHANGE_TOKEN_EXPIRED',
        message: /timeline 1, before a failover to timeline 2.*take a full export/,
      });
    }
    const fresh = await get(server);
    t.equal((await get(server, `?changedSince=${fresh.token}`)).status, 200, 'a token of the new timeline is good');

    const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-failover-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const state = path.join(dir, 'state.json');
    writeFileSync(state, JSON.stringify({ token: lost.token, book: 'kb', includeCategories: false, html: true }));
    const run = await runCli(['changes', '--server', server.url, '--book', 'kb', '--state', state]);
    t.equal(run.code, 4, 'changes stops with exit 4');
    t.match(run.stderr, /failover/, 'naming the failover');
    t.match(
      run.stderr,
      new RegExp(`remove ${state.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} to start again`),
      'and saying what to do',
    );
  },
);
