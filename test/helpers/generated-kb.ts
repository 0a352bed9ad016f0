/**
 * Knowledge bases of realistic generated documents (src/generate/generator.ts: HTML with relative media,
 * categories, inactive documents) for user u1 (key kbx_u1), written through the real seed writer,
 * with the ids each export should return, in order.
 */
import { generateDocuments } from '../../src/generate/generator.js';
import type { Sql } from '../../src/db/connect.js';
import { SeedWriter } from '../../src/load/seed-writer.js';
import { seed, simpleSeed } from './app.js';

export interface GeneratedBook {
  slug: string;
  /** Ids of a default export (active documents, categories excluded), in export order. */
  ids: string[];
  /** Ids with `excludeCategories=false` (every active node). */
  idsWithCategories: string[];
}

export interface BookSpec {
  slug: string;
  documents: number;
  /** Body size scale of src/generate/generator.ts (6: the realistic distribution, mean 12 KB of HTML). */
  paragraphs: number;
  seed?: number;
}

/** Seeds user u1 (key kbx_u1) with one book per spec; the first spec's book is created by simpleSeed. */
export async function seedGeneratedBooks(sql: Sql, specs: BookSpec[]): Promise<Map<string, GeneratedBook>> {
  await seed(sql, simpleSeed([], { slug: specs[0]!.slug, bookId: `b-${specs[0]!.slug}` }));
  const books = new Map<string, GeneratedBook>();
  await sql.begin(async (tx) => {
    const w = new SeedWriter(tx as never, 200);
    await w.begin();
    for (const [i, spec] of specs.entries()) {
      const bookId = `b-${spec.slug}`;
      if (i > 0) await w.addBook({ id: bookId, ownerId: 'u1', slug: spec.slug, name: spec.slug }, spec.slug);
      const book: GeneratedBook = { slug: spec.slug, ids: [], idsWithCategories: [] };
      const gen = {
        bookId,
        documents: spec.documents,
        paragraphs: spec.paragraphs,
        ...(spec.seed !== undefined ? { seed: spec.seed } : {}),
      };
      for (const d of generateDocuments(gen)) {
        if (d.status === 1) {
          book.idsWithCategories.push(d.id);
          if (d.type !== 'category') book.ids.push(d.id);
        }
        await w.addDocument(bookId, d);
      }
      books.set(spec.slug, book);
    }
    await w.finish();
  });
  return books;
}
