/** `kb-export backfill`: the export text of documents written before sql/0009 and sql/0010, filled in batches. */
import type { Config } from '../config.js';
import { backfillExportText } from '../db/backfill-export-text.js';
import { withDatabase } from '../db/with-database.js';

/** Fills every document's missing export text and prints how many rows it filled. */
export async function backfillCommand(config: Config, print: (line: string) => void): Promise<void> {
  await withDatabase(config, async (sql) => {
    const started = Date.now();
    const done = await backfillExportText(sql, {
      onBatch: (rows) => {
        if (rows % 100_000 === 0) print(`${rows.toLocaleString('en')} documents filled`);
      },
    });
    const s = ((Date.now() - started) / 1000).toFixed(1);
    print(`filled the export text of ${done.rows.toLocaleString('en')} documents in ${done.batches} batches, ${s} s`);
  });
}
