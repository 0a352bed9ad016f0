/**
 * Pruning of the removals deltas need (D12.4) by kbx_prune_changes (sql/0006, sql/0008), safe from
 * many instances. The floor moves at most once an hour and rows go once a day, however often it is
 * called: its cleanup would otherwise cancel exports on hot standbys (D11.5).
 */
import type { Sql } from '../db/connect.js';
import { inTransaction } from '../db/transaction.js';

/** Longest one pruning may run: the first after months without one may delete much. */
const PRUNE_TIMEOUT_MS = 15 * 60_000;

/** Resolves to the number of removals deleted; rejects with the database's error. */
export async function pruneChanges(sql: Sql, retentionDays: number): Promise<number> {
  return inTransaction(sql, async (tx) => {
    await tx.unsafe(`SET LOCAL statement_timeout = ${PRUNE_TIMEOUT_MS}`);
    const [row] = await tx<
      { n: string }[]
    >`SELECT kbx_prune_changes(make_interval(days => ${retentionDays}))::text AS n`;
    return Number(row!.n);
  });
}

interface PruningOptions {
  retentionDays: number;
  everyMs: number;
  onPruned?: (deleted: number) => void;
  onError: (err: unknown) => void;
}

/** Prunes now and every `everyMs` on an unref'd timer; `stop()` resolves once a run in flight ends. */
export function startChangePruning(sql: Sql, opts: PruningOptions): { stop(): Promise<void> } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  const run = () => {
    timer = undefined;
    running = pruneChanges(sql, opts.retentionDays)
      .then((n) => opts.onPruned?.(n))
      .catch(opts.onError)
      .finally(() => {
        running = undefined;
        if (!stopped) timer = setTimeout(run, opts.everyMs).unref();
      });
  };
  timer = setTimeout(run, 0).unref();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
