/** `kb-export warm`: a book's rewrite plans made ahead of its first export, by the export's own rewrite stage. */
import { type DocumentRow } from '../export/snapshot/rows.js';
import type { Config } from '../config.js';
import type { Sql } from '../db/connect.js';
import { rewriteRows, type PlanUse } from '../export/rewrite/rewrite-stage.js';
import { PlanWriter } from '../export/rewrite/plans/plan-store.js';
import { RewritePool } from '../export/rewrite/workers/rewrite-pool.js';
import { documentQuery } from '../export/snapshot/query.js';
import { withDatabase } from '../db/with-database.js';
import { progressReporter } from '../observe/progress.js';
import { inTransaction, type TransactionSql } from '../db/transaction.js';

type Print = (line: string) => void;

/** Rows per FETCH: about 1.2 MB of a usual knowledge base's rows. */
const BATCH_ROWS = 100;

export interface WarmSummary {
  documents: number;
  /** Documents whose contentHtml may hold media and whose stored plan was already current. */
  current: number;
  computed: number;
  written: number;
  failed: number;
}

/** The id of knowledge base `slug` (of `owner` when given). Throws when there is none, or several owners have one. */
async function bookIdOf(sql: Sql, slug: string, owner: string | undefined): Promise<string> {
  const books = owner
    ? await sql<{ id: string }[]>`SELECT id FROM books WHERE slug = ${slug} AND owner_id = ${owner}`
    : await sql<{ id: string }[]>`SELECT id FROM books WHERE slug = ${slug}`;
  if (books.length === 0)
    throw new Error(`no knowledge base with slug "${slug}"${owner ? ` owned by "${owner}"` : ''}`);
  if (books.length > 1) throw new Error(`${books.length} users have a knowledge base "${slug}": name one with --owner`);
  return books[0]!.id;
}

/** Warms the plans of every active document of `opts.book`. Throws for an unknown or ambiguous slug. */
export async function warmPlans(
  config: Config,
  sql: Sql,
  opts: { book: string; owner?: string },
): Promise<WarmSummary> {
  const bookId = await bookIdOf(sql, opts.book, opts.owner);
  const [{ total }] =
    (await sql`SELECT count(*)::int AS total FROM documents WHERE book_id = ${bookId} AND status = 1`) as unknown as [
      { total: number },
    ];
  const writer = new PlanWriter(sql, {
    log: { warn: (obj, msg) => process.stderr.write(`${msg}: ${(obj as { err?: Error }).err?.message ?? ''}\n`) },
  });
  const plans: PlanUse = { writer, counts: { reused: 0, computed: 0 } };
  const pool =
    config.rewriteWorkers > 0
      ? new RewritePool(config.rewriteWorkers, { jobTimeoutMs: config.rewriteTimeoutMs })
      : null;
  const progress = progressReporter('warming', total);
  let documents = 0;
  try {
    const readAll = async (tx: TransactionSql) => {
      const stage = {
        prefix: config.mediaProxyPrefix,
        pool,
        offloadBytes: config.rewriteOffloadBytes,
        plans,
        pause: async () => {},
      };
      await tx.unsafe(
        `DECLARE kbx_warm NO SCROLL CURSOR FOR ${documentQuery({ excludeCategories: false, includeContentHtml: true, withPlans: true })}`,
        [bookId],
      );
      for (;;) {
        const rows = (await tx.unsafe(`FETCH FORWARD ${BATCH_ROWS} FROM kbx_warm`).raw()) as unknown as DocumentRow[];
        await rewriteRows(rows, stage);
        // One batch's plans at a time: the writer's queue never fills, so nothing is dropped.
        await writer.drain();
        documents += rows.length;
        progress.update(documents);
        if (rows.length < BATCH_ROWS) break;
      }
    };
    await inTransaction(sql, readAll, { mode: 'READ ONLY ISOLATION LEVEL REPEATABLE READ' });
  } finally {
    progress.stop();
    await writer.close();
    await pool?.close();
  }
  const { written, failed } = writer.counts;
  return { documents, current: plans.counts.reused, computed: plans.counts.computed, written, failed };
}

export async function warmCommand(config: Config, opts: { book: string; owner?: string }, print: Print): Promise<void> {
  const started = Date.now();
  const s = await withDatabase(config, (sql) => warmPlans(config, sql, opts));
  print(
    `warmed "${opts.book}" under media proxy prefix ${config.mediaProxyPrefix}: ${s.documents} documents, ` +
      `${s.current} plans already current, ${s.computed} computed, ${s.written} written` +
      `${s.failed > 0 ? `, ${s.failed} not written (see the log)` : ''} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  if (s.failed > 0) throw new Error(`${s.failed} plans could not be written`);
}
