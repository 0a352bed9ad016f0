/**
 * Transactions whose link to PostgreSQL is cut (src/db/transaction.ts), through a real TCP proxy:
 * postgres.js 3.4 sent ROLLBACK on the dead socket and the process died with a TypeError. Checked
 * in-process (the test process must live on) and through the built CLI (`load`, `warm`): one
 * line that says the connection was lost, exit code 1, nothing loaded, no session left behind.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { connect } from '../../src/db/connect.js';
import { isConnectionLost } from '../../src/db/dependency.js';
import { inTransaction } from '../../src/db/transaction.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { waitForNoBackends } from '../helpers/pg-activity.js';
import { startTcpProxy, targetOf, type TcpProxy } from '../helpers/tcp-proxy.js';
import { untracked } from '../../bench/lib/untracked.js';
import { CLI } from '../helpers/paths.js';

const db = await createTestDatabase(t);

/** Sessions of `applicationName` still connected to the test database, once they had up to 5 s to go. */
const sessionsLeft = async (applicationName: string) =>
  (await waitForNoBackends(db.sql, { applicationName, database: db.name }, { pollMs: 100 })).length;

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the built CLI against the database through `proxy`; `during` runs while it does. */
async function runCli(proxy: TcpProxy, args: string[], during: () => Promise<void>): Promise<CliRun> {
  const child = new Promise<CliRun>((resolve) =>
    execFile(
      ...untracked([process.execPath, CLI, ...args]),
      {
        env: { ...process.env, DATABASE_URL: proxy.urlFor(db.url), REWRITE_WORKERS: '0' },
        timeout: 120_000,
        maxBuffer: 1 << 20,
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    ),
  );
  await during();
  return child;
}

/** Whether a CLI's stderr is the one plain line of a lost connection, no stack trace. */
function assertLostConnectionLine(t: Test, run: CliRun, what: string): void {
  t.equal(run.code, 1, `${what}: exit code 1 (stderr: ${run.stderr.slice(0, 300)})`);
  t.match(
    run.stderr,
    /^kb-export: lost the connection to PostgreSQL \(.+\); what was not committed was discarded\n$/,
    `${what}: one line that says so`,
  );
  t.notMatch(run.stderr, /TypeError|\n\s+at /, `${what}: no crash, no stack trace`);
}

async function waitFor(cond: () => boolean, what: string, pollMs = 50): Promise<void> {
  for (const end = Date.now() + 60_000; !cond();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(pollMs);
  }
}

t.test(
  'in-process: a cut mid-transaction rejects with the connection error, sends nothing more, and the process lives on',
  async (t) => {
    const proxy = await startTcpProxy(t, targetOf(db.url));
    const sql = connect(proxy.urlFor(db.url), { max: 1, applicationName: 'kbx-test-cut', fetchTypes: false });
    t.teardown(() => sql.end({ timeout: 1 }));
    let reachedAfterCut = false;
    const result = inTransaction(sql, async (tx) => {
      await tx`CREATE TEMP TABLE cut_probe (n int)`;
      proxy.cutAll();
      await tx`INSERT INTO cut_probe VALUES (1)`;
      reachedAfterCut = true;
    });
    const err = await result.then(
      () => null,
      (e: unknown) => e,
    );
    t.ok(isConnectionLost(err), `rejected with the lost connection: ${(err as Error)?.message}`);
    t.notOk(reachedAfterCut, 'the work stopped at the cut');
    // postgres.js wrote its ROLLBACK from a setImmediate: give a crash every chance to happen.
    await sleep(500);
    t.equal(await sessionsLeft('kbx-test-cut'), 0, 'PostgreSQL ended the session (and discarded its transaction)');
    t.equal((await sql`SELECT 1 AS one`)[0]!.one, 1, 'the pool reconnects for the next query');
  },
);

t.test('in-process: any other failure rolls back on the live connection, as begin() does', async (t) => {
  await db.sql`CREATE TABLE IF NOT EXISTS rollback_probe (n int)`;
  const failure = new Error('the work failed');
  await t.rejects(
    inTransaction(db.sql, async (tx) => {
      await tx`INSERT INTO rollback_probe VALUES (1)`;
      throw failure;
    }),
    failure,
  );
  t.equal((await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rollback_probe`)[0]!.n, 0, 'rolled back');
  const n = await inTransaction(db.sql, async (tx) => (await tx<{ n: number }[]>`SELECT 2 AS n`)[0]!.n, {
    mode: 'READ ONLY',
  });
  t.equal(n, 2, 'a transaction that succeeds returns its result');
});

t.test('kb-export load: a link cut mid-load ends with one line, nothing loaded, no session left', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kbx-cut-load-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'seed.json');
  // Only its size matters: large enough that a third of it goes upstream well before the COMMIT.
  // Written here rather than by the generator's CLI, which costs a process and realistic bodies.
  const text = 'a paragraph of a page to load, long enough to take a while. '.repeat(170);
  const documents = Array.from({ length: 1000 }, (_, i) => ({
    id: `d-${i}`,
    slug: `d-${i}`,
    name: `Page ${i}`,
    type: 'document',
    orderKey: `k${String(i).padStart(5, '0')}`,
    status: 1,
    contentStr: text,
    contentHtml: `<p>${text}</p>`,
  }));
  const user = { id: 'u-cut', name: 'Cut', apiKeys: [{ id: 'k-cut', key: 'kbx_cut' }] };
  await writeFile(
    file,
    JSON.stringify({ users: [user], books: [{ id: 'b-cut', ownerId: 'u-cut', slug: 'cut', name: 'Cut', documents }] }),
  );
  const proxy = await startTcpProxy(t, targetOf(db.url));
  const seedBytes = (await stat(file)).size;
  t.ok(seedBytes > 15 * 1024 * 1024, `a seed file of ${seedBytes} bytes`);
  const run = await runCli(proxy, ['load', file], async () => {
    // Cut once about a third of the file went upstream: mid-load, well before its COMMIT. Polled
    // often: some 20 MB load in a second or two.
    await waitFor(() => proxy.stats().bytesToUpstream > seedBytes / 3, 'a third of the seed file upstream', 5);
    proxy.cutAll();
  });
  assertLostConnectionLine(t, run, 'load');
  const [row] = await db.sql<{ books: number; documents: number; users: number }[]>`
    SELECT (SELECT count(*)::int FROM books) AS books, (SELECT count(*)::int FROM documents) AS documents,
           (SELECT count(*)::int FROM users) AS users`;
  t.same(row, { books: 0, documents: 0, users: 0 }, 'nothing was loaded');
  t.equal(await sessionsLeft('kb-export-cli'), 0, 'no CLI session is left');
});

t.test('kb-export warm: a link cut mid-FETCH ends with one line, and the export database is whole', async (t) => {
  await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 300, paragraphs: 6, seed: 5 }]);
  const proxy = await startTcpProxy(t, targetOf(db.url));
  for (const cutAt of [64 * 1024, 256 * 1024, 700 * 1024]) {
    proxy.cutAfter(cutAt);
    const started = Date.now();
    const run = await runCli(proxy, ['warm', '--book', 'kb', '--owner', 'u1'], async () => {});
    const ms = Date.now() - started;
    proxy.cutAfter(null);
    assertLostConnectionLine(t, run, `warm cut after ${cutAt} bytes`);
    // Its pool's other connections are closed at once, not after the 5 s a command that succeeded gets.
    t.ok(ms < 5000, `warm cut after ${cutAt} bytes: exited ${ms} ms after it started`);
    t.equal(await sessionsLeft('kb-export-cli'), 0, `warm cut after ${cutAt} bytes: no CLI session is left`);
  }
  // Whatever plans were written before a cut are whole rows: a later warm completes over them.
  const done = await runCli(proxy, ['warm', '--book', 'kb', '--owner', 'u1'], async () => {});
  t.equal(done.code, 0, done.stderr);
  t.match(done.stdout, /warmed "kb" .*: \d+ documents/);
});
