/**
 * What the export version's triggers and the change tracking cost writers (decisions.md D9.1,
 * D12.6): single-document UPDATEs in one book, autocommit, from 1 and from 8 connections, on
 * databases migrated up to 0001 (no trigger, the baseline), 0002 (a counter bumped by every write),
 * 0003 (a random version bumped only by changes to exported columns), 0006 (0003 plus
 * changed_xid and removals for deltas), 0007 (0006 plus changed_xid_no_html), 0009 (0007 plus the
 * export text of sql/0009), 0010 (0009 plus the bodies' export text, lz4) and 0010 with pglz,
 * plus 0003 with its row-level UPDATE OF trigger replaced by a statement-level one comparing every
 * updated row, the alternative it was chosen over; then
 * statements over the whole book, and what removals take on disk. Every figure is a ratio against
 * another database in the same run; the variants take turns.
 *
 * `npm run build && node dist/bench/write-cost.js [--quick] [--rounds=N] [--synchronous-commit=off]`:
 * with DATABASE_URL, throw-away databases `kb_export_write_cost_*` on that server; otherwise a
 * throw-away embedded PostgreSQL. Prints a Markdown table (bench/RESULTS.md keeps one).
 */
import { rm } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import postgres from 'postgres';
import { connect, type Sql } from '../src/db/connect.js';
import { benchDatabase } from './lib/bench-database.js';
import { migrate } from '../src/db/migrate.js';
import { prng } from '../src/generate/random.js';
import { migrationsUpTo, VARIANTS, type Variant } from './lib/write-cost-variants.js';
import { loadGenerated } from './lib/load-generated.js';
import { machineInfo } from './machine.js';

type Workload = 'autosave' | 'rename' | 'mix' | 'status' | 'save';
const WORKLOADS: { name: Workload; what: string }[] = [
  { name: 'autosave', what: 'content_yjs only' },
  { name: 'rename', what: 'name only' },
  { name: 'mix', what: '4 content_yjs : 1 name' },
  { name: 'status', what: 'status toggled: about half are removals' },
  { name: 'save', what: 'content_str and content_html rewritten, as a save of the text' },
];
const BOOK = 'b-write-cost';
/** Updates per slice: the variants take turns slice by slice. */
const SLICE = 250;

const dbName = (v: Variant) => `kb_export_write_cost_${v.name.replace(/-/g, '_')}`;

async function createVariant(admin: Sql, base: string, v: Variant, documents: number): Promise<string> {
  await admin.unsafe(`DROP DATABASE IF EXISTS ${dbName(v)} WITH (FORCE)`);
  await admin.unsafe(`CREATE DATABASE ${dbName(v)}`);
  const u = new URL(base);
  u.pathname = `/${dbName(v)}`;
  const sql = connect(u.toString(), { max: 1, applicationName: 'kb-export-write-cost' });
  try {
    const dir = await migrationsUpTo(v.upTo);
    await migrate(sql, dir);
    await rm(dir, { recursive: true, force: true });
    if (v.extraSql) await sql.unsafe(v.extraSql);
    await loadGenerated(sql, {
      documents,
      bookId: BOOK,
      bookSlug: 'write-cost',
      userId: 'u-write-cost',
      apiKey: 'kbx_write_cost',
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
  return u.toString();
}

interface Plan {
  kinds: ('yjs' | 'name' | 'status' | 'body')[];
  ids: string[];
}

function plan(workload: Workload, updates: number, docIds: string[], seed: number): Plan {
  const r = prng(seed);
  const kinds: Plan['kinds'] = [];
  const ids: string[] = [];
  for (let i = 0; i < updates; i++) {
    kinds.push(
      workload === 'status'
        ? 'status'
        : workload === 'save'
          ? 'body'
          : workload === 'rename' || (workload === 'mix' && i % 5 === 0)
            ? 'name'
            : 'yjs',
    );
    ids.push(docIds[Math.floor(r() * docIds.length)]!);
  }
  return { kinds, ids };
}

/** An editor's state as an autosave writes it: ~1 KB, different every time. */
function editorState(i: number): Buffer {
  const b = Buffer.alloc(1024, i % 251);
  b.writeUInt32LE(i, 0);
  return b;
}

/** A pool of `connections` connections to one variant's database, running slices of a plan. */
class Writer {
  private readonly sql: Sql;

  constructor(
    url: string,
    private readonly connections: number,
    syncCommit: string,
  ) {
    this.sql = postgres(url, {
      max: connections,
      onnotice: () => {},
      connection: { application_name: 'kb-export-write-cost', synchronous_commit: syncCommit },
    });
  }

  /** Runs updates `from` to `to` of `p`, one autocommit UPDATE per statement, from every connection; returns ms. */
  async run(p: Plan, from: number, to: number): Promise<number> {
    const one = (i: number) =>
      p.kinds[i] === 'yjs'
        ? this.sql.unsafe('UPDATE documents SET content_yjs = $1 WHERE id = $2', [editorState(i), p.ids[i]!], {
            prepare: true,
          })
        : p.kinds[i] === 'name'
          ? this.sql.unsafe('UPDATE documents SET name = $1 WHERE id = $2', [`Renamed ${i}`, p.ids[i]!], {
              prepare: true,
            })
          : p.kinds[i] === 'body'
            ? this.sql.unsafe(
                // The last character of each body replaced: a new text of the same size every time.
                'UPDATE documents SET content_str = left(content_str, -1) || $1, content_html = left(content_html, -1) || $1 WHERE id = $2',
                [String.fromCharCode(0x61 + (i % 26)), p.ids[i]!],
                { prepare: true },
              )
            : this.sql.unsafe(
                'UPDATE documents SET status = CASE WHEN status = 1 THEN 0 ELSE 1 END WHERE id = $1',
                [p.ids[i]!],
                { prepare: true },
              );
    let next = from;
    const worker = async () => {
      for (let i = next++; i < to; i = next++) await one(i);
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: this.connections }, worker));
    return performance.now() - started;
  }

  close(): Promise<void> {
    return this.sql.end({ timeout: 5 });
  }
}

/**
 * Runs plan `p` on every variant from `connections` connections, in slices of SLICE updates that
 * alternate between the variants (the machine is shared: a burst of other work hits them all
 * alike); returns ms per variant, the warm-up left out.
 */
async function runCell(
  urls: Map<string, string>,
  connections: number,
  p: Plan,
  syncCommit: string,
): Promise<Map<string, number>> {
  const writers = new Map(VARIANTS.map((v) => [v.name, new Writer(urls.get(v.name)!, connections, syncCommit)]));
  const ms = new Map(VARIANTS.map((v) => [v.name, 0]));
  try {
    // Warm-up: every connection opened and both statements prepared before the clock starts.
    const warm = Math.min(p.kinds.length, 40 * connections);
    for (const w of writers.values()) await w.run(p, 0, warm);
    for (let from = warm, slice = 0; from < p.kinds.length; from += SLICE, slice++) {
      const to = Math.min(p.kinds.length, from + SLICE);
      for (let i = 0; i < VARIANTS.length; i++) {
        const v = VARIANTS[(i + slice) % VARIANTS.length]!;
        ms.set(
          v.name,
          ms.get(v.name)! + ((await writers.get(v.name)!.run(p, from, to)) * p.kinds.length) / (p.kinds.length - warm),
        );
      }
    }
  } finally {
    for (const w of writers.values()) await w.close();
  }
  return ms;
}

/** Runs `fn` on a connection of its own to `url`. */
async function once<T>(url: string, fn: (sql: Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

const version = (url: string) =>
  once(
    url,
    async (sql) => (await sql<{ v: string }[]>`SELECT export_version::text AS v FROM books WHERE id = ${BOOK}`)[0]!.v,
  );
const vacuum = (url: string) => once(url, (sql) => sql`VACUUM documents, books`);
/** Removals recorded so far, and the newest changed_xid (sql/0006). */
const tracking = (url: string) =>
  once(url, async (sql) => {
    const [r] = await sql<{ removals: number; newest: string }[]>`
      SELECT (SELECT count(*)::int FROM document_removals) AS removals, (SELECT max(changed_xid)::text FROM documents) AS newest`;
    return r!;
  });

const COPY_COLUMNS = `book_id, slug, name, type, parent_id, order_key, status, description, emoji_info, cover_url, cover_position, tags,
  theme_id, background_theme_id, body_font_size, created_at, updated_at, content_str, content_html, content_yjs, content_json`;

/** Times one statement copying every document of the book under new ids, then one deleting the copies. */
const bulkInsertDelete = (url: string) =>
  once(url, async (sql) => {
    let started = performance.now();
    await sql.unsafe(
      `INSERT INTO documents (id, ${COPY_COLUMNS}) SELECT id || '-copy', ${COPY_COLUMNS} FROM documents WHERE book_id = $1`,
      [BOOK],
    );
    const insert = performance.now() - started;
    started = performance.now();
    await sql`DELETE FROM documents WHERE book_id = ${BOOK} AND id LIKE '%-copy'`;
    return { insert, delete: performance.now() - started };
  });

/** Times one statement updating every document of the book (a bulk rename, autosave or edit of the text). */
const bulk = (url: string, kind: 'name' | 'yjs' | 'body') =>
  once(url, async (sql) => {
    const started = performance.now();
    if (kind === 'name') await sql`UPDATE documents SET name = name || '.' WHERE book_id = ${BOOK}`;
    else if (kind === 'body')
      await sql`UPDATE documents SET content_str = content_str || '.', content_html = content_html || '.' WHERE book_id = ${BOOK}`;
    else await sql`UPDATE documents SET content_yjs = ${editorState(7)} WHERE book_id = ${BOOK}`;
    return performance.now() - started;
  });

/** What the change tracking keeps on disk in `sql`'s database (0006), as a sentence. */
async function storage(sql: Sql): Promise<string> {
  // Freshly built indexes: their size per entry, without what this run's churn left in them.
  await sql`REINDEX TABLE document_removals`;
  await sql`REINDEX INDEX documents_changes_idx`;
  await sql`VACUUM ANALYZE document_removals, documents`;
  const [r] = await sql<
    { n: number; heap: number; row: number; indexes: number; docs: number; idx: number; export_idx: number }[]
  >`
    SELECT (SELECT count(*)::int FROM document_removals) AS n,
           pg_relation_size('document_removals')::int AS heap,
           (SELECT avg(pg_column_size(r.*))::int FROM document_removals r) AS row,
           (pg_relation_size('document_removals_book_idx') + pg_relation_size('document_removals_xid_idx'))::int AS indexes,
           (SELECT count(*)::int FROM documents WHERE status = 1) AS docs,
           pg_relation_size('documents_changes_idx')::int AS idx,
           pg_relation_size('documents_export_idx')::int AS export_idx`;
  const each = (bytes: number, n: number) => `${n > 0 ? Math.round(bytes / n) : 0} bytes`;
  return (
    `Storage under 0006 after the run: ${r!.n.toLocaleString('en')} removals (book id ${BOOK.length} and document ids about ` +
    `${BOOK.length + 5} characters long) take ${each(r!.heap, r!.n)} each in document_removals' pages (rows of ${r!.row} bytes) ` +
    `and ${each(r!.indexes, r!.n)} in its two indexes; documents_changes_idx, built afresh, takes ${each(r!.idx, r!.docs)} ` +
    `per active document (documents_export_idx: ${each(r!.export_idx, r!.docs)}); changed_xid adds 8 bytes to each document row.`
  );
}

/** The value of `--name=value` on the command line. */
const option = (name: string) => process.argv.find((a) => a.startsWith(`${name}=`))?.slice(name.length + 1);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const documents = quick ? 300 : 2000;
  const updates = quick ? 2000 : 10_000;
  const rounds = Number(option('--rounds') ?? (quick ? 1 : 3));
  // The server's own setting by default: an autocommit write waits for its WAL flush, as an editor's does.
  const syncCommit = option('--synchronous-commit') ?? 'on';
  const m = machineInfo();
  const srv = await benchDatabase('kb_export_write_cost', { shared: true });
  const admin = postgres(srv.url, { max: 1, onnotice: () => {} });
  const urls = new Map<string, string>();
  try {
    const [{ v: pg }] = (await admin`SELECT current_setting('server_version') AS v`) as unknown as [{ v: string }];
    for (const v of VARIANTS) urls.set(v.name, await createVariant(admin, srv.url, v, documents));
    const probe = postgres(urls.get('none')!, { max: 1, onnotice: () => {} });
    const docIds = (await probe<{ id: string }[]>`SELECT id FROM documents ORDER BY id`).map((r) => r.id);
    const [{ html }] = (await probe`SELECT avg(octet_length(content_html))::int AS html FROM documents`) as unknown as [
      { html: number },
    ];
    await probe.end();

    const times = new Map<string, number[]>();
    const add = (k: string, ms: number) => times.set(k, [...(times.get(k) ?? []), ms]);
    for (let round = 0; round < rounds; round++) {
      const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length]!);
      process.stderr.write(`round ${round + 1} of ${rounds}\n`);
      for (const w of WORKLOADS) {
        for (const connections of [1, 8]) {
          const p = plan(w.name, updates, docIds, 1000 * round + connections);
          const versioned = VARIANTS.filter((v) => v.autosaveBumps !== null);
          const tracked = VARIANTS.filter((v) => v.tracksChanges);
          for (const v of VARIANTS) await vacuum(urls.get(v.name)!);
          const before = await Promise.all(versioned.map((v) => version(urls.get(v.name)!)));
          const trackedBefore = await Promise.all(tracked.map((v) => tracking(urls.get(v.name)!)));
          const ms = await runCell(urls, connections, p, syncCommit);
          for (const v of VARIANTS) add(`${w.name}/${connections}/${v.name}`, ms.get(v.name)!);
          // What each variant promises, checked on the way: 0003 leaves the version to autosaves,
          // 0006 leaves changed_xid to them too, and records removals only when documents leave.
          for (const [i, v] of versioned.entries()) {
            const changed = before[i] !== (await version(urls.get(v.name)!));
            if (changed !== (w.name === 'autosave' ? v.autosaveBumps : true))
              throw new Error(`${v.name}, ${w.name}: version changed: ${changed}`);
          }
          for (const [i, v] of tracked.entries()) {
            const now = await tracking(urls.get(v.name)!);
            const moved = now.newest !== trackedBefore[i]!.newest;
            const removed = now.removals > trackedBefore[i]!.removals;
            if (moved !== (w.name !== 'autosave') || removed !== (w.name === 'status')) {
              throw new Error(`${v.name}, ${w.name}: changed_xid moved: ${moved}, removals recorded: ${removed}`);
            }
          }
        }
      }
      for (const v of order) {
        for (const kind of ['name', 'yjs', 'body'] as const) {
          await vacuum(urls.get(v.name)!);
          add(`bulk-${kind}/${v.name}`, await bulk(urls.get(v.name)!, kind));
        }
        await vacuum(urls.get(v.name)!);
        const copies = await bulkInsertDelete(urls.get(v.name)!);
        add(`bulk-insert/${v.name}`, copies.insert);
        add(`bulk-delete/${v.name}`, copies.delete);
      }
    }

    const out: string[] = [];
    out.push(
      `Machine: ${m.cpu}, ${m.cores} cores, ${m.memGiB} GiB; ${m.os}; Node.js ${m.node}; PostgreSQL ${pg} (${srv.where}).`,
    );
    out.push(
      `One book of ${documents.toLocaleString('en')} generated documents (src/generate/generator.ts, seed 42; contentHtml ${html.toLocaleString('en')} bytes on average), ` +
        `${updates.toLocaleString('en')} single-document UPDATEs per cell (autocommit, synchronous_commit=${syncCommit}, documents drawn at random), median of ${rounds} round(s), the variants taking turns every ${SLICE} updates; ` +
        'µs per update is wall time ÷ updates (so with 8 connections it is the inverse of throughput).',
    );
    for (const v of VARIANTS) out.push(`- ${v.name}: ${v.what}`);
    out.push('');
    out.push(
      '| Workload | Connections | none | 0002 | 0003 | 0003 statement-level | 0006 | 0007 | 0009 | 0010 | 0010 pglz | 0002 ÷ none | 0003 ÷ none | 0003 ÷ 0002 | statement-level ÷ 0003 | 0006 ÷ none | 0006 ÷ 0003 | 0007 ÷ 0006 | 0009 ÷ 0007 | 0010 ÷ 0009 | pglz ÷ 0010 |',
    );
    out.push(
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    );
    const us = (ms: number, n: number) => (ms * 1000) / n;
    const line = (label: string, key: string, unit: (ms: number) => string) => {
      const t = Object.fromEntries(VARIANTS.map((v) => [v.name, median(times.get(`${key}/${v.name}`)!)])) as Record<
        string,
        number
      >;
      const r = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
      out.push(
        `| ${label} | ${unit(t.none!)} | ${unit(t['0002']!)} | ${unit(t['0003']!)} | ${unit(t['0003-stmt']!)} | ${unit(t['0006']!)} | ${unit(t['0007']!)} | ${unit(t['0009']!)} | ${unit(t['0010']!)} | ${unit(t['0010-pglz']!)} | ` +
          `${r(t['0002']!, t.none!)} | ${r(t['0003']!, t.none!)} | ${r(t['0003']!, t['0002']!)} | ${r(t['0003-stmt']!, t['0003']!)} | ` +
          `${r(t['0006']!, t.none!)} | ${r(t['0006']!, t['0003']!)} | ${r(t['0007']!, t['0006']!)} | ${r(t['0009']!, t['0007']!)} | ${r(t['0010']!, t['0009']!)} | ${r(t['0010-pglz']!, t['0010']!)} |`,
      );
    };
    for (const w of WORKLOADS) {
      for (const c of [1, 8])
        line(`${w.name} (${w.what}) | ${c}`, `${w.name}/${c}`, (ms) => `${us(ms, updates).toFixed(0)} µs`);
    }
    line(`one statement renaming all ${documents} documents | 1`, 'bulk-name', (ms) => `${ms.toFixed(0)} ms`);
    line(`one statement writing content_yjs of all ${documents} | 1`, 'bulk-yjs', (ms) => `${ms.toFixed(0)} ms`);
    line(`one statement editing the text of all ${documents} | 1`, 'bulk-body', (ms) => `${ms.toFixed(0)} ms`);
    line(`one statement inserting ${documents} documents | 1`, 'bulk-insert', (ms) => `${ms.toFixed(0)} ms`);
    line(`one statement deleting ${documents} documents | 1`, 'bulk-delete', (ms) => `${ms.toFixed(0)} ms`);
    out.push('');
    out.push(await once(urls.get('0006')!, storage));
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    for (const v of VARIANTS) await admin.unsafe(`DROP DATABASE IF EXISTS ${dbName(v)} WITH (FORCE)`).catch(() => {});
    await admin.end({ timeout: 5 });
    await srv.stop();
  }
}

await main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
});
