/**
 * What a delta reads against a full export (decisions.md D12.5), at the SQL level the server runs:
 * the generated `large` knowledge base (100,000 documents) is loaded into a throw-away database,
 * a change token's snapshot is taken, 10 documents change (renames, HTML changes, deletions), and
 * the delta's cursors (src/export/snapshot/changes-query.ts) are planned and timed against the full
 * export's cursor over the same snapshot, both fetched to the end in batches of 1,000 rows. The
 * plans must find the changes through documents_changes_idx and document_removals_book_idx
 * (the run fails otherwise); their EXPLAIN ANALYZE is printed.
 *
 * `npm run build && node dist/bench/changes.js [--quick]` (`--quick`: 20,000 documents): with
 * DATABASE_URL, a database `kb_export_changes_bench` on that server, dropped at the end; otherwise a
 * throw-away embedded PostgreSQL. Prints Markdown (bench/RESULTS.md keeps it).
 */
import { performance } from 'node:perf_hooks';
import postgres from 'postgres';
import { connect, type Sql } from '../src/db/connect.js';
import { benchDatabase } from './lib/bench-database.js';
import { migrate } from '../src/db/migrate.js';
import { changedDocumentQuery, removedQuery } from '../src/export/snapshot/changes-query.js';
import { documentQuery, type DocumentQueryOptions } from '../src/export/snapshot/query.js';
import { loadGenerated } from './lib/load-generated.js';
import { prng } from '../src/generate/random.js';
import { machineInfo } from './machine.js';

const DB = 'kb_export_changes_bench';
const BOOK = 'bench-changes';
const ROUNDS = 5;

const REPEATABLE_READ = 'ISOLATION LEVEL REPEATABLE READ READ ONLY';

/** Fetches every row of `text` through a cursor in batches of 1,000; returns rows and bytes. */
async function drain(
  tx: postgres.TransactionSql,
  text: string,
  params: string[],
): Promise<{ rows: number; bytes: number }> {
  let rows = 0;
  let bytes = 0;
  await tx
    .unsafe(text, params)
    .raw()
    .cursor(1000, (batch) => {
      rows += batch.length;
      for (const r of batch) for (const c of r as unknown as (Buffer | null)[]) bytes += c?.length ?? 0;
    });
  return { rows, bytes };
}

interface Timed {
  ms: number;
  rows: number;
  bytes: number;
}

/** A full export's cursor, or a delta's two, in one new snapshot. */
async function timed(sql: Sql, opts: DocumentQueryOptions, since?: string): Promise<Timed> {
  const started = performance.now();
  const { rows, bytes } = await sql.begin(REPEATABLE_READ, async (tx) => {
    if (since === undefined) return drain(tx, documentQuery(opts), [BOOK]);
    const docs = await drain(tx, changedDocumentQuery(opts), [BOOK, since]);
    const removed = await drain(tx, removedQuery(opts), [BOOK, since]);
    return { rows: docs.rows + removed.rows, bytes: docs.bytes + removed.bytes };
  });
  return { ms: performance.now() - started, rows, bytes };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** EXPLAIN ANALYZE of a cursor declared over `text`, as the export declares its own. */
async function explain(sql: Sql, text: string, params: string[]): Promise<string> {
  const rows = await sql.begin(REPEATABLE_READ, (tx) =>
    tx.unsafe(`EXPLAIN (ANALYZE, BUFFERS) DECLARE c NO SCROLL CURSOR FOR ${text}`, params),
  );
  return rows.map((r) => r['QUERY PLAN'] as string).join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const documents = quick ? 20_000 : 100_000;
  const m = machineInfo();
  const db = await benchDatabase(DB);
  const sql = connect(db.url, { max: 2, applicationName: 'kb-export-changes-bench' });
  const out: string[] = [];
  try {
    await migrate(sql);
    process.stderr.write(`loading ${documents.toLocaleString('en')} generated documents\n`);
    const loaded = await loadGenerated(sql, {
      documents,
      seed: 42,
      bookId: BOOK,
      bookSlug: 'changes',
      userId: 'bench-user',
      apiKey: 'kbx_bench_changes',
    });
    const [{ pg }] = (await sql`SELECT current_setting('server_version') AS pg`) as unknown as [{ pg: string }];

    // A write transaction older than the load (on this shared server) would keep the token's xmin
    // below it and make every loaded row a candidate of the delta: wait for such ones to end.
    const [{ next }] = (await sql`SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS next`) as unknown as [
      { next: string },
    ];
    const deadline = Date.now() + 300_000;
    while (
      BigInt((await sql<{ x: string }[]>`SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x`)[0]!.x) <
      BigInt(next)
    ) {
      if (Date.now() > deadline) throw new Error('a transaction older than the load still runs after 5 minutes');
      await new Promise((r) => setTimeout(r, 100));
    }
    const [{ since }] = (await sql.begin(
      REPEATABLE_READ,
      (tx) => tx`SELECT pg_current_snapshot()::text AS since`,
    )) as unknown as [{ since: string }];
    const ids = (
      await sql<
        { id: string }[]
      >`SELECT id FROM documents WHERE book_id = ${BOOK} AND status = 1 AND type <> 'category' ORDER BY id`
    ).map((r) => r.id);
    const r = prng(7);
    const picked = new Set<string>();
    while (picked.size < 10) picked.add(ids[Math.floor(r() * ids.length)]!);
    const [renamed, edited, deleted] = [[...picked].slice(0, 4), [...picked].slice(4, 7), [...picked].slice(7)];
    for (const id of renamed) await sql`UPDATE documents SET name = name || ' (renamed)' WHERE id = ${id}`;
    for (const id of edited)
      await sql`UPDATE documents SET content_html = content_html || '<p>edited</p>' WHERE id = ${id}`;
    for (const id of deleted) await sql`DELETE FROM documents WHERE id = ${id}`;

    const plans: string[] = [];
    for (const [what, text, index] of [
      [
        'documents',
        changedDocumentQuery({ excludeCategories: true, includeContentHtml: true }),
        'documents_changes_idx',
      ],
      ['removed', removedQuery({ excludeCategories: true }), 'document_removals_book_idx'],
    ] as const) {
      const plan = await explain(sql, text, [BOOK, since]);
      if (!plan.includes(index) || /Seq Scan on documents|documents_export_idx/.test(plan)) {
        throw new Error(`the delta's ${what} cursor does not go through ${index}:\n${plan}`);
      }
      plans.push(
        `${what} (\`${what === 'documents' ? 'changedDocumentQuery' : 'removedQuery'}\`, excludeCategories=true):`,
        '',
        '```',
        plan,
        '```',
        '',
      );
    }

    const cells: { label: string; opts: DocumentQueryOptions }[] = [
      { label: 'includeContentHtml=true', opts: { excludeCategories: true, includeContentHtml: true } },
      { label: 'includeContentHtml=false', opts: { excludeCategories: true, includeContentHtml: false } },
    ];
    const rows: string[] = [];
    for (const c of cells) {
      const full: Timed[] = [];
      const delta: Timed[] = [];
      for (let i = 0; i < ROUNDS; i++) {
        process.stderr.write(`${c.label}: round ${i + 1} of ${ROUNDS}\n`);
        full.push(await timed(sql, c.opts));
        delta.push(await timed(sql, c.opts, since));
      }
      const f = median(full.map((x) => x.ms));
      const d = median(delta.map((x) => x.ms));
      rows.push(
        `| ${c.label} | ${full[0]!.rows.toLocaleString('en')} rows, ${(full[0]!.bytes / 1e6).toFixed(1)} MB in ${f.toFixed(0)} ms | ` +
          `${delta[0]!.rows} rows, ${(delta[0]!.bytes / 1e3).toFixed(1)} kB in ${d.toFixed(1)} ms | ${(d / f).toFixed(5)}× |`,
      );
    }

    // What 0006 costs a database that already holds documents: its index is built in the migration.
    const reindexStarted = performance.now();
    await sql`REINDEX INDEX documents_changes_idx`;
    const reindexMs = performance.now() - reindexStarted;
    const [sizes] = await sql<{ changes: number; exportIdx: number; active: number }[]>`
      SELECT pg_relation_size('documents_changes_idx')::int AS "changes", pg_relation_size('documents_export_idx')::int AS "exportIdx",
             (SELECT count(*)::int FROM documents WHERE status = 1) AS active`;

    out.push(
      `Machine: ${m.cpu}, ${m.cores} cores, ${m.memGiB} GiB; ${m.os}; Node.js ${m.node}; PostgreSQL ${pg} (${db.where}).`,
    );
    out.push(
      `One generated knowledge base of ${documents.toLocaleString('en')} documents (seed 42, loaded in ${(loaded.ms / 1000).toFixed(1)} s with the ` +
        `change tracking in place), a change token's snapshot, then 10 changes: 4 renames, 3 contentHtml edits, 3 deletions. ` +
        `Each figure is the median of ${ROUNDS} runs in a new REPEATABLE READ snapshot, cursors fetched to the end in batches of 1,000 rows ` +
        '(the delta: its documents, then its removed ids); bytes are the column values received.',
    );
    out.push('');
    out.push('| excludeCategories=true | Full export cursor | Delta since the token (10 changes) | Delta ÷ full |');
    out.push('|---|---:|---:|---:|');
    out.push(...rows);
    out.push('');
    out.push(
      `documents_changes_idx: ${(sizes!.changes / 1e6).toFixed(1)} MB for ${sizes!.active.toLocaleString('en')} active documents ` +
        `(documents_export_idx: ${(sizes!.exportIdx / 1e6).toFixed(1)} MB); building it over the ${documents.toLocaleString('en')} ` +
        `documents, as the migration does for existing data, took ${(reindexMs / 1000).toFixed(1)} s.`,
    );
    out.push('');
    out.push(...plans);
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await sql.end({ timeout: 5 });
    await db.stop();
  }
}

await main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
});
