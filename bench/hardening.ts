/**
 * Scenarios 8 and 9 of `npm run bench` (the hardening issue, decisions.md D8):
 * 8. a size-skewed knowledge base (small documents, then documents of 8 MB with an inline image):
 *    the server's peak RSS against 150 MB + a small constant × the largest document, beside the
 *    peak of an ordinary export in the same run; what the size cursor (D8.4) costs, against COPY
 *    of the same rows; and a document of nothing but media tags (2 MB and 8 MB of `<img src=a>`,
 *    D8.8): peak RSS and the slowest `/livez` answer while it is exported.
 * 9. overload: 64 clients at once against EXPORT_CONCURRENCY=8: completed exports, 503s and 429s
 *    (each checked to be the documented envelope with Retry-After), time to first byte, peak RSS.
 */
import { request } from 'undici';
import type { Sql } from '../src/db/connect.js';
import { documentSizeQuery } from '../src/export/snapshot/query.js';
import { BENCH_KEY, BENCH_USER, type Dataset } from './lib/datasets.js';
import { agent, copyOnce, copyQuery, exportOnce, median } from './lib/http-client.js';
import { startServer } from './lib/server-process.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';

const MB = 1024 * 1024;
const now = () => Number(process.hrtime.bigint()) / 1e6;

/** (Re)creates knowledge base `skewed`: 1,000 small documents, then `large` of 8 MB. Generated in PostgreSQL. */
async function seedSkewed(sql: Sql, large: number): Promise<{ slug: string; documents: number }> {
  const bookId = 'bench-skewed';
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books WHERE id = ${bookId}`;
    await tx`INSERT INTO books (id, owner_id, slug, name) VALUES (${bookId}, ${BENCH_USER}, 'skewed', 'Size-skewed')`;
    await tx.unsafe(
      `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str, content_html)
       SELECT 'sk-s' || lpad(i::text, 5, '0'), $1, 's' || i, 'Small ' || i, 'document', 'a' || lpad(i::text, 5, '0'), 1,
              'small text ' || i, '<p>small <img src="img/' || i || '.png"></p>'
       FROM generate_series(1, 1000) i`,
      [bookId],
    );
    await tx.unsafe(
      `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_str, content_html)
       SELECT 'sk-l' || lpad(i::text, 5, '0'), $1, 'l' || i, 'Large ' || i, 'document', 'b' || lpad(i::text, 5, '0'), 1,
              'large ' || i, '<p>pasted</p><img src="data:image/png;base64,' || repeat('iVBORw0KGgo' || (i % 10), $2) || '"><img src="x.png">'
       FROM generate_series(1, $3::int) i`,
      [bookId, Math.floor((8 * MB) / 12), large],
    );
  });
  return { slug: 'skewed', documents: 1000 + large };
}

/** Scenario 8. */
async function skewed(
  databaseUrl: string,
  sql: Sql,
  small: Dataset,
  large: Dataset,
  quick: boolean,
  log: (l: string) => void,
): Promise<ScenarioResult> {
  const kb = await seedSkewed(sql, quick ? 5 : 20);
  const server = await startServer({ databaseUrl, env: { EXPORT_CACHE_BYTES: '0' } });
  let peakSmall: number;
  let peak: number;
  let run;
  try {
    for (let i = 0; i < 3; i++) await exportOnce(server.base, BENCH_KEY, small.slug, { html: true });
    peakSmall = await server.peakRss();
    await server.resetPeak();
    log(`8. export of ${kb.documents} documents, ${quick ? 5 : 20} of them 8 MB`);
    run = await exportOnce(server.base, BENCH_KEY, kb.slug, { html: true });
    if (run.count !== kb.documents)
      throw new Error(`skewed export returned ${run.count} documents, expected ${kb.documents}`);
    peak = await server.peakRss();
    log(`   ${mb(run.bytes)} in ${fmt(run.totalMs / 1000, 1)} s, peak RSS ${mb(peak)}`);
  } finally {
    await server.stop();
  }
  const bound = 150 * MB + 8 * 8 * MB;

  // What the size cursor costs: its query drained on its own, against COPY of the exported rows.
  log(`8. the size cursor over ${large.name}, against COPY`);
  const copy = await copyOnce(databaseUrl, large.bookId, true);
  const sizeQuery = documentSizeQuery({ excludeCategories: true, includeContentHtml: true }).replace(
    '$1',
    `'${large.bookId}'`,
  );
  const sizes: number[] = [];
  for (let i = 0; i < 3; i++) sizes.push((await copyQuery(databaseUrl, sizeQuery)).totalMs);
  const sizesMs = median(sizes);
  const rows: ResultRow[] = [
    {
      scenario: '8. Size-skewed memory',
      what: `peak RSS exporting ${kb.documents.toLocaleString('en')} documents (${quick ? 5 : 20} of 8 MB after 1,000 small ones, ${mb(run.bytes)})`,
      baseline: `${small.name} export ${mb(peakSmall)}; D8.4 bound 150 MB + 8 × 8 MB = ${mb(bound)}`,
      measured: mb(peak),
      ratio: peak / bound,
      target: '≤ 200 MB (≈ 150 MB + 6 × largest)',
      met: peak <= 200e6,
    },
    {
      scenario: '8. Size-skewed memory',
      what: `the size cursor (D8.4) over ${large.name}: its query alone, drained`,
      baseline: `COPY of the exported rows ${fmt(copy.totalMs / 1000, 2)} s`,
      measured: `${fmt(sizesMs / 1000, 2)} s`,
      ratio: sizesMs / copy.totalMs,
      target: '',
      met: null,
    },
  ];
  return {
    rows,
    notes: [
      '8: the skewed knowledge base is generated in PostgreSQL (repeat of a base64 run, so it is cheap to store); the export runs with ' +
        'the server defaults and EXPORT_CACHE_BYTES=0; peak is VmHWM after a reset. The size cursor reads octet_length of the exported ' +
        'columns, answered from TOAST headers without reading the bodies: its share is the second row.',
    ],
  };
}

/** (Re)creates knowledge base `media-tags`: one document of `mb` MB of `<img src=a>`. */
async function seedMediaTags(sql: Sql, sizeMb: number): Promise<string> {
  const bookId = 'bench-media-tags';
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books WHERE id = ${bookId}`;
    await tx`INSERT INTO books (id, owner_id, slug, name) VALUES (${bookId}, ${BENCH_USER}, 'media-tags', 'Media tags')`;
    await tx.unsafe(
      `INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
       VALUES ('mt-1', $1, 'mt', 'Media tags', 'document', 'a0', 1, repeat('<img src=a>', $2::int))`,
      [bookId, Math.floor((sizeMb * MB) / 11)],
    );
  });
  return 'media-tags';
}

/** Scenario 8, media tags: one document of `mb` MB of `<img src=a>` exported with `/livez` polled beside it. */
async function mediaTags(databaseUrl: string, sql: Sql, sizeMb: number, log: (l: string) => void): Promise<ResultRow> {
  const slug = await seedMediaTags(sql, sizeMb);
  const server = await startServer({ databaseUrl, env: { EXPORT_CACHE_BYTES: '0' } });
  let worst = 0;
  let polls = 0;
  let peak: number;
  let rest: number;
  let run;
  try {
    await server.resetPeak();
    rest = await server.peakRss();
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const t0 = now();
        await (await request(`${server.base}/livez`, { dispatcher: agent })).body.dump();
        worst = Math.max(worst, now() - t0);
        polls++;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    log(`8. export of one document of ${sizeMb} MB of media tags, /livez polled beside it`);
    run = await exportOnce(server.base, BENCH_KEY, slug, { html: true });
    polling = false;
    await poller;
    peak = await server.peakRss();
    log(
      `   ${mb(run.bytes)} in ${fmt(run.totalMs / 1000, 1)} s, peak RSS ${mb(peak)}, /livez at worst ${fmt(worst, 0)} ms over ${polls} polls`,
    );
  } finally {
    await server.stop();
  }
  return {
    scenario: '8. Size-skewed memory',
    what: `one document of ${sizeMb} MB of \`<img src=a>\` (${Math.floor((sizeMb * MB) / 11).toLocaleString('en')} URLs, ${mb(run.bytes)} exported): peak RSS, and the slowest of ${polls} \`/livez\` answers meanwhile`,
    baseline: `at rest ${mb(rest)}; D8.8: /livez within 250 ms`,
    measured: `${mb(peak)}, /livez ${fmt(worst, 0)} ms`,
    ratio: worst / 250,
    target: '/livez ≤ 250 ms, RSS ≤ 230 MB',
    met: worst <= 250 && peak <= 230e6,
  };
}

interface Outcome {
  status: number;
  ttfbMs: number;
  totalMs: number;
  ok: boolean;
}

/** Scenario 9. */
async function overload(databaseUrl: string, medium: Dataset, log: (l: string) => void): Promise<ScenarioResult> {
  const server = await startServer({
    databaseUrl,
    env: {
      EXPORT_CACHE_BYTES: '0',
      EXPORT_CONCURRENCY: '8',
      EXPORT_PER_USER_MAX: '64',
      EXPORT_QUEUE_MAX: '32',
      EXPORT_QUEUE_TIMEOUT_MS: '10000',
    },
  });
  let peak: number;
  let outcomes: Outcome[];
  let wallMs: number;
  try {
    await server.resetPeak();
    log(`9. 64 clients at once against 8 export slots (${medium.name})`);
    const url = `${server.base}/api/v1/open/books/${medium.slug}/docs`;
    const one = async (): Promise<Outcome> => {
      const t0 = now();
      const res = await request(url, { headers: { authorization: `Bearer ${BENCH_KEY}` }, dispatcher: agent });
      const ttfbMs = now() - t0;
      const text = await res.body.text();
      const totalMs = now() - t0;
      if (res.statusCode === 200) {
        const m = /"meta":\{"count":(\d+)\}\}$/.exec(text.slice(-64));
        return { status: 200, ttfbMs, totalMs, ok: m !== null && Number(m[1]) === medium.exported };
      }
      const env = JSON.parse(text) as { success?: boolean; code?: string };
      const code = res.statusCode === 503 ? 'SERVICE_UNAVAILABLE' : res.statusCode === 429 ? 'RATE_LIMITED' : '';
      const ok = env.success === false && env.code === code && Number(res.headers['retry-after']) > 0;
      return { status: res.statusCode, ttfbMs, totalMs, ok };
    };
    const t0 = now();
    outcomes = await Promise.all(Array.from({ length: 64 }, one));
    wallMs = now() - t0;
    peak = await server.peakRss();
  } finally {
    await server.stop();
  }
  const done = outcomes.filter((o) => o.status === 200);
  const refused = outcomes.filter((o) => o.status === 503);
  const limited = outcomes.filter((o) => o.status === 429);
  const wrong = outcomes.filter((o) => !o.ok);
  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
  };
  const ttfb = done.map((o) => o.ttfbMs);
  log(
    `   ${done.length} complete, ${refused.length} × 503, ${limited.length} × 429, ${wrong.length} wrong, peak RSS ${mb(peak)}`,
  );
  return {
    rows: [
      {
        scenario: '9. Overload',
        what:
          `64 clients at once, EXPORT_CONCURRENCY=8, EXPORT_QUEUE_MAX=32, EXPORT_QUEUE_TIMEOUT_MS=10000, ${medium.name} with HTML: ` +
          `${done.length} complete, ${refused.length} × 503, ${limited.length} × 429 in ${fmt(wallMs / 1000, 1)} s; ` +
          `time to first byte of the complete ones p50 ${fmt(pct(ttfb, 50), 0)} ms, p99 ${fmt(pct(ttfb, 99), 0)} ms; ` +
          `503s answered after p50 ${fmt(
            pct(
              refused.map((o) => o.ttfbMs),
              50,
            ),
            0,
          )} ms`,
        baseline: '64 requests',
        measured: `${wrong.length} neither a complete body nor a documented envelope; peak RSS ${mb(peak)}`,
        ratio: wrong.length / 64,
        target: 'every request complete or 503/429 with Retry-After',
        met: wrong.length === 0,
      },
    ],
    notes: [
      '9: every 200 body is checked to end with meta.count equal to the documents in the database; every 503/429 to be the ' +
        'section 7 envelope with its code and a Retry-After header. One request per client, all sent at once.',
    ],
  };
}

/** Runs scenarios 8 and 9. */
export async function run(opts: {
  databaseUrl: string;
  sql: Sql;
  small: Dataset;
  medium: Dataset;
  large: Dataset;
  quick: boolean;
  log: (line: string) => void;
}): Promise<ScenarioResult> {
  const a = await skewed(opts.databaseUrl, opts.sql, opts.small, opts.large, opts.quick, opts.log);
  const tags = [
    await mediaTags(opts.databaseUrl, opts.sql, 2, opts.log),
    await mediaTags(opts.databaseUrl, opts.sql, 8, opts.log),
  ];
  const b = await overload(opts.databaseUrl, opts.medium, opts.log);
  const note =
    '8, media tags: a document whose HTML is nothing but `<img src=a>`, exported cold (REWRITE_PLANS on, no plan stored): its ' +
    'plan is built on a rewrite worker as the tokenizer finds each URL, and spliced as it is written, in slices of the event loop.';
  return { rows: [...a.rows, ...tags, ...b.rows], notes: [...a.notes, note, ...b.notes] };
}
