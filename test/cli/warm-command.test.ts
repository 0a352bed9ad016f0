/**
 * `kb-export warm` (src/cli/warm-command.ts): plans computed ahead of the first export, which then
 * parses nothing and gives the bytes of an export without plans; a second warm finds them current;
 * unknown and ambiguous slugs are refused with a message; and the built CLI says what it did.
 */
import { execFile } from 'node:child_process';
import t from 'tap';
import { request } from 'undici';
import { warmPlans } from '../../src/cli/warm-command.js';
import { loadConfig } from '../../src/config.js';
import { seed, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';
import { seedGeneratedBooks } from '../helpers/generated-kb.js';
import { untracked } from '../../bench/lib/untracked.js';
import { CLI } from '../helpers/paths.js';

const db = await createTestDatabase(t);
// Enough documents with relative media to need plans; how many is not the point.
await seedGeneratedBooks(db.sql, [{ slug: 'kb', documents: 60, paragraphs: 2, seed: 11 }]);
const config = loadConfig({ DATABASE_URL: db.url, REWRITE_WORKERS: '0' });

async function exportBody(server: TestServer): Promise<Buffer> {
  const res = await request(`${server.url}/api/v1/open/books/kb/docs?excludeCategories=false`, {
    headers: { authorization: 'Bearer kbx_u1' },
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`export: ${res.statusCode} ${body.subarray(0, 200).toString()}`);
  return body;
}

t.test('plans computed ahead: the first export parses nothing and exports the same bytes', async (t) => {
  const first = await warmPlans(config, db.sql, { book: 'kb' });
  t.ok(first.computed > 0, `${first.computed} plans computed`);
  t.equal(first.written, first.computed, 'each of them written');
  t.equal(first.current, 0, 'none was stored before');
  t.equal(first.failed, 0);
  const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM rewrite_plans`;
  t.equal(row!.n, first.computed, 'stored');

  const again = await warmPlans(config, db.sql, { book: 'kb' });
  t.same(
    { computed: again.computed, current: again.current, written: again.written },
    { computed: 0, current: first.computed, written: 0 },
    'a second warm finds every plan current',
  );

  const reference = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_PLANS: 'false' }, db);
  const server = await startServer(t, { EXPORT_CACHE_BYTES: '0', REWRITE_WORKERS: '0' }, db);
  const body = await exportBody(server);
  t.ok(body.equals(await exportBody(reference)), 'byte-identical to an export without plans');
  const metric = await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_plans_total')!.get();
  const by = Object.fromEntries(metric.values.map((v) => [String(v.labels.outcome), v.value]));
  t.equal(by.computed, 0, 'the first export parsed nothing');
  t.equal(by.reused, first.computed, 'it spliced every stored plan');
});

t.test('unknown and ambiguous knowledge bases are refused', async (t) => {
  await t.rejects(warmPlans(config, db.sql, { book: 'nope' }), { message: 'no knowledge base with slug "nope"' });
  await seed(db.sql, simpleSeed([], { user: 'u2', slug: 'kb', bookId: 'b-u2-kb' }));
  await t.rejects(warmPlans(config, db.sql, { book: 'kb' }), {
    message: /2 users have a knowledge base "kb": name one with --owner/,
  });
  const s = await warmPlans(config, db.sql, { book: 'kb', owner: 'u2' });
  t.equal(s.documents, 0, 'with --owner, that one (empty)');
});

t.test('the CLI prints what it did, and names --book when it is missing', async (t) => {
  const run = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(
        ...untracked([process.execPath, CLI, ...args]),
        { env: { ...process.env, DATABASE_URL: db.url, REWRITE_WORKERS: '0' }, timeout: 60_000 },
        (err, stdout, stderr) =>
          resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
      ),
    );
  const ok = await run(['warm', '--book', 'kb', '--owner', 'u1']);
  t.equal(ok.code, 0, ok.stderr);
  t.match(
    ok.stdout,
    /warmed "kb" under media proxy prefix \/media\/: \d+ documents, \d+ plans already current, 0 computed, 0 written/,
  );
  const usage = await run(['warm']);
  t.equal(usage.code, 2, 'a usage error');
  t.match(usage.stderr, /--book/);
});
