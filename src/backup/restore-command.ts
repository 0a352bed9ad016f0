/**
 * `kb-export restore --owner USER --file PATH`: loads an export (a backup) back as a knowledge base
 * owned by USER, all-or-nothing in one transaction, like `load` (seed-format.md rule 6). The book
 * and its documents keep their ids, slugs, order keys and timestamps. What an export does not hold
 * cannot come back: inactive documents, the editor formats (content_yjs, content_json) and, in a
 * backup made without --include-categories, the categories. A document keeps its parentId even
 * when the parent is not in the file (an inactive or excluded one), so the restored knowledge base
 * exports the same documents; the command says how many. contentHtml and cover URLs come back
 * with the media proxy prefix they were exported with, which a later export leaves as it is
 * (D3.2).
 */
import { SeedError } from '../errors.js';
import type { Config } from '../config.js';
import { withDatabase } from '../db/with-database.js';
import { validateBook, validateDocument } from '../load/seed-validate.js';
import { SeedWriter } from '../load/seed-writer.js';
import { readExport } from './export-reader.js';
import { inTransaction } from '../db/transaction.js';

interface RestoreOptions {
  owner: string;
  file: string;
  /** `json` or `ndjson`; by default from the file's name. */
  format?: 'json' | 'ndjson';
}

/** Restores; resolves with the line to print. Throws SeedError (or the reader's Error) and restores nothing. */
export async function restoreCommand(config: Config, o: RestoreOptions, print: (line: string) => void): Promise<void> {
  await withDatabase(config, (sql) =>
    inTransaction(sql, async (tx) => {
      const writer = new SeedWriter(tx);
      await writer.begin();
      let bookId: string | null = null;
      let slug = '';
      let n = 0;
      for await (const record of readExport(o.file, o.format === undefined ? undefined : o.format === 'ndjson')) {
        if (record.kind === 'book') {
          const book = validateBook({ ...record.book, ownerId: o.owner }, 'book');
          bookId = book.id;
          slug = book.slug;
          await writer.addBook(book, `"${book.slug}" (id "${book.id}")`);
        } else {
          await writer.addDocument(bookId!, validateDocument({ ...record.document, status: 1 }, `documents[${n++}]`));
        }
      }
      if (bookId === null) throw new SeedError(`${o.file}: no knowledge base in the file`);
      const summary = await writer.finish({ checkParents: false });
      const [{ orphans }] = (await tx`
        SELECT count(*)::int AS orphans FROM documents d
        WHERE d.book_id = ${bookId} AND d.parent_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM documents p WHERE p.id = d.parent_id AND p.book_id = d.book_id)`) as unknown as [
        { orphans: number },
      ];
      print(`restored "${slug}" for ${o.owner}: ${summary.documents} documents from ${o.file}`);
      if (orphans > 0) {
        print(
          `${orphans} of them name a parent the file does not hold (inactive, or a category of a backup without --include-categories); their parentId is kept`,
        );
      }
    }),
  );
}
