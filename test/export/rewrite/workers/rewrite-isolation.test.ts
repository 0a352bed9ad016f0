/**
 * decisions.md D8.6 end to end, through the real app and a real socket: two exports share one
 * rewrite worker (fixtures/poison-worker.ts); a document of one holds a marker that kills the
 * worker mid-export. That export fails (aborted body after its first byte, D6.3); the other,
 * whose batches were queued behind the poison, completes.
 */
import t from 'tap';
import { drainBody } from '../../../helpers/http.js';
import { request } from 'undici';
import { Writable } from 'node:stream';
import { doc, seed, simpleSeed, startServer } from '../../../helpers/app.js';
import { createTestDatabase } from '../../../helpers/db.js';

// 30 batches: the healthy export is still sending batches when the poison, the other's third, is reached.
const HEALTHY_DOCS = 300;
const POISONED_DOCS = 60;
/** Past the first two batches of 10 rows: the poisoned export has sent its status and first bytes. */
const POISON_AT = 25;

const orderKey = (i: number) => `a${String(i).padStart(4, '0')}`;
const html = (book: string, i: number) =>
  `<p>${book} ${i}${i === POISON_AT && book === 'poisoned' ? ' POISON-EXIT' : ''}</p><img src="img/${i}.png">`;
const docs = (book: string, n: number) =>
  Array.from({ length: n }, (_, i) => doc(`${book}-${i}`, orderKey(i), { contentHtml: html(book, i) }));

t.test('a document that kills a rewrite worker fails its own export; a concurrent one completes', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed(docs('healthy', HEALTHY_DOCS), { user: 'u1', slug: 'healthy' }));
  await seed(db.sql, simpleSeed(docs('poisoned', POISONED_DOCS), { user: 'u2', slug: 'poisoned' }));
  const lines: string[] = [];
  const logger = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  // One worker: every batch of both exports goes through the worker the poison kills.
  const env = {
    EXPORT_BATCH_SIZE: '10',
    REWRITE_OFFLOAD_BYTES: '0',
    EXPORT_CACHE_BYTES: '0',
    REWRITE_WORKERS: '1',
    LOG_LEVEL: 'warn',
  };
  const server = await startServer(t, env, db, {
    workerUrl: new URL(`./fixtures/poison-worker.js`, import.meta.url),
    logger,
  });
  const deaths = () =>
    lines
      .flatMap((l) => l.split('\n'))
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => String(l.msg).startsWith('rewrite worker died'));
  const get = async (slug: string, user: string) => {
    const res = await request(`${server.url}/api/v1/open/books/${slug}/docs`, {
      headers: { authorization: `Bearer kbx_${user}` },
    });
    const { bytes, error } = await drainBody(res.body);
    return { status: res.statusCode, text: bytes.toString('utf8'), error };
  };

  const [healthy, poisoned] = await Promise.all([get('healthy', 'u1'), get('poisoned', 'u2')]);

  t.equal(poisoned.status, 200, 'the poisoned export had sent its first batch');
  t.ok(poisoned.error !== null, 'its body ends in an error, not a clean end (D6.3)');
  t.throws(() => JSON.parse(poisoned.text), 'and does not parse');
  t.notMatch(poisoned.text, /"meta"/, 'no meta.count');

  t.equal(healthy.status, 200);
  t.equal(healthy.error, null, 'the other export ends cleanly');
  const body = JSON.parse(healthy.text) as {
    documents: { id: string; contentHtml: string }[];
    meta: { count: number };
  };
  t.equal(body.meta.count, HEALTHY_DOCS, 'meta.count is all its documents');
  t.strictSame(
    body.documents.map((d) => d.id),
    Array.from({ length: HEALTHY_DOCS }, (_, i) => `healthy-${i}`),
    'every document, in order',
  );
  const unrewritten = body.documents.filter(
    (d, i) => d.contentHtml !== `<p>healthy ${i}</p><img src="/media/img/${i}.png">`,
  );
  t.strictSame(unrewritten, [], 'every contentHtml rewritten by a worker (D3)');

  const died = deaths();
  t.equal(died.length, 1, 'one worker died, logged once');
  t.match(died[0], { reason: 'rewrite worker stopped (exit code 3)', failed: 1 });
  t.ok(
    (died[0]!.resent as number) >= 1,
    `batches of the other export queued behind the poison were sent again (${died[0]!.resent})`,
  );
  // The replacement starts after its backoff (100 ms) and is counted then.
  let restarts = 0;
  for (let i = 0; i < 50 && restarts < 1; i++) {
    await new Promise((r) => setTimeout(r, 20));
    restarts =
      (await server.app.metrics.registry.getSingleMetric('kb_export_rewrite_worker_restarts_total')!.get()).values[0]
        ?.value ?? 0;
  }
  t.equal(restarts, 1, 'the worker was replaced');
});
