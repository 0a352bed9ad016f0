/**
 * `/metrics` over a real socket (decisions.md D10.3), parsed with a Prometheus text parser: the
 * values move as exports complete, are left by their client and are refused; no key, not rate
 * limited. METRICS_PORT (a listener of its own) is tested with the server process in
 * test/server.test.ts.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import parse from 'parse-prometheus-text-format';
import t from 'tap';
import { call } from '../helpers/http.js';
import { doc, seed, seedSizedBook, simpleSeed, startServer, type TestServer } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';

const PATH = '/api/v1/open/books/kb/docs';

/** The scrape, as metric name -> samples; each sample `labels -> value`. */
async function scrape(server: TestServer) {
  const res = await call(server.url, '/metrics', { auth: null });
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  const families = new Map(parse(res.text).map((f) => [f.name, f]));
  const value = (name: string, labels: Record<string, string> = {}): number => {
    const family = families.get(name);
    if (!family) throw new Error(`no metric ${name}`);
    const sample = family.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
    return Number(sample?.value ?? sample?.count ?? NaN);
  };
  return { text: res.text, headers: res.headers, families, value };
}

async function until(what: string, check: () => Promise<boolean>, limitMs = 5000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

t.test(
  '/metrics: the exposition parses, the service metrics are kb_export_…, the runtime ones standard (D10.3), values move with exports',
  async (t) => {
    const db = await createTestDatabase(t);
    // About 15 MB, so a client that reads nothing holds the export (the socket buffers take only part
    // of it). Written by PostgreSQL: through the seed loader's JSON parser it cost seconds of CPU here.
    await seedSizedBook(db.sql, 'u1', 1500, { content_str: `repeat('x', 10000)` });
    const server = await startServer(t, { RATE_LIMIT_MAX: '3', EXPORT_PER_USER_MAX: '1', EXPORT_CACHE_BYTES: '0' }, db);

    const before = await scrape(server);
    t.match(before.headers['content-type'], /^text\/plain; version=0\.0\.4/);
    for (const name of before.families.keys())
      t.match(name, /^(kb_export_|process_|nodejs_)/, `${name} is the service's or the runtime's`);
    // The names stock dashboards and alerts look for (D10.3).
    for (const name of [
      'process_resident_memory_bytes',
      'process_cpu_seconds_total',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
    ]) {
      t.ok(before.families.has(name), `${name} is there under its standard name`);
      t.notOk(before.families.has(`kb_export_${name}`), `and not as kb_export_${name}`);
    }
    for (const name of ['kb_export_exports_streaming', 'kb_export_rewrite_worker_restarts_total'])
      t.ok(before.families.has(name), `${name} is there`);
    t.equal(before.value('kb_export_exports_total', { outcome: 'complete' }), 0);

    const done = await call(server.url, PATH);
    t.equal(done.status, 200);
    const after = await scrape(server);
    t.equal(after.value('kb_export_exports_total', { outcome: 'complete' }), 1, 'a complete export counted');
    t.ok(after.families.get('kb_export_export_duration_seconds')?.metrics.length, 'the duration histogram is exposed');
    // This text parser drops the sum and count of labelled histograms: those are read from the registry.
    const histogram = async (name: string, suffix: string) => {
      const json = await server.app.metrics.registry.getMetricsAsJSON();
      const values = json.find((m) => m.name === name)?.values ?? [];
      return values.find(
        (v) => (v as { metricName?: string }).metricName === `${name}_${suffix}` && v.labels.outcome === 'complete',
      )?.value;
    };
    t.equal(await histogram('kb_export_export_duration_seconds', 'count'), 1, 'its duration observed');
    t.equal(
      await histogram('kb_export_export_bytes', 'sum'),
      Buffer.byteLength(done.text),
      'its bytes, as the client received them',
    );
    t.equal(after.value('kb_export_cache_misses_total'), 0, 'the cache is off: not even asked');

    // A client that asks for the export and reads nothing holds the user's one slot.
    const url = new URL(server.url);
    const holder = net.connect(Number(url.port), url.hostname);
    await new Promise((resolve) => holder.once('connect', resolve));
    holder.write(`GET ${PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer kbx_u1\r\n\r\n`);
    holder.pause();
    await until('the export to stream', async () => (await scrape(server)).value('kb_export_exports_streaming') === 1);
    t.equal(
      (await scrape(server)).value('kb_export_db_pool_connections_in_use', { pool: 'export' }),
      1,
      'it holds an export connection',
    );
    t.equal((await call(server.url, PATH)).status, 429, 'a second export of the same user is refused');
    t.equal(
      (await scrape(server)).value('kb_export_exports_total', { outcome: 'rejected' }),
      1,
      'and counted as rejected',
    );
    holder.destroy();
    await until(
      'the held export to end',
      async () => (await scrape(server)).value('kb_export_exports_total', { outcome: 'client_gone' }) === 1,
      10_000,
    );
    t.equal((await scrape(server)).value('kb_export_exports_streaming'), 0, 'nothing streams any more');
    for (let i = 0; i < 5; i++)
      t.equal(
        (await call(server.url, '/metrics', { auth: null })).status,
        200,
        'never rate limited (RATE_LIMIT_MAX=3)',
      );
  },
);

t.test('the export cache and the rewrite pool report through /metrics', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a0', { contentHtml: '<img src="a.png">' })]));
  const server = await startServer(t, { REWRITE_WORKERS: '1' }, db);
  await call(server.url, PATH);
  await call(server.url, PATH);
  const m = await scrape(server);
  t.equal(m.value('kb_export_cache_misses_total'), 1, 'the first export missed the cache');
  t.equal(m.value('kb_export_cache_hits_total'), 1, 'the second was served from it');
  t.equal(m.value('kb_export_exports_total', { outcome: 'complete' }), 2);
  t.equal(m.value('kb_export_rewrite_worker_restarts_total'), 0);
  t.equal(m.value('kb_export_db_pool_connections_max', { pool: 'export' }), server.config.exportConcurrency);
});
