/** `kb-export load FILE`: a seed file streamed in one transaction, memory bounded by its largest record. */
import { SeedError } from '../errors.js';
import type { Readable } from 'node:stream';
import Assembler from 'stream-json/assembler.js';
import { parser } from 'stream-json';
import type { Sql } from '../db/connect.js';
import { SeedWriter, type LoadSummary } from './seed-writer.js';
import { validateBook, validateDocument, validateUser } from './seed-validate.js';
import { inTransaction } from '../db/transaction.js';

interface Token {
  name: string;
  value?: unknown;
}

class Tokens {
  private readonly it: AsyncIterator<Token>;
  /** The record being read, named in JSON errors (seed-format.md rule 6). */
  where = 'seed file';
  constructor(stream: AsyncIterable<Token>) {
    this.it = stream[Symbol.asyncIterator]();
  }
  async next(): Promise<Token> {
    const r = await this.it.next();
    if (r.done) throw new SeedError(`${this.where}: unexpected end of file`);
    return r.value;
  }
  async end(): Promise<void> {
    const r = await this.it.next();
    if (!r.done) throw new SeedError(`seed file: unexpected ${r.value.name} after the top-level object`);
  }
}

async function readValue(tokens: Tokens, first: Token): Promise<unknown> {
  const asm = new Assembler();
  asm.consume(first as never);
  while (!asm.done) asm.consume((await tokens.next()) as never);
  return asm.current;
}

async function expect(tokens: Tokens, name: string, where: string): Promise<void> {
  const t = await tokens.next();
  if (t.name !== name)
    throw new SeedError(`${where}: expected ${name.replace('start', '').toLowerCase()}, found ${t.name}`);
}

interface LoadOptions {
  onProgress?: (summary: LoadSummary) => void;
}

/** Loads a seed file's stream; throws SeedError naming the bad record, and then nothing is written. */
export async function loadSeed(sql: Sql, input: Readable, opts: LoadOptions = {}): Promise<LoadSummary> {
  const tokenStream = input.pipe(
    parser.asStream({ packValues: true, streamValues: false }),
  ) as unknown as AsyncIterable<Token> & Readable;
  input.on('error', (err) => tokenStream.destroy(err));
  // Without this listener the stream's 'error' can fire after the iterator let go of it, crashing the process.
  tokenStream.on('error', () => {});
  const tokens = new Tokens(tokenStream);
  try {
    return await inTransaction(sql, async (tx) => {
      const writer = new SeedWriter(tx);
      await writer.begin();
      await expect(tokens, 'startObject', 'seed file');
      let seenBooks = false;
      for (;;) {
        const t = await tokens.next();
        if (t.name === 'endObject') break;
        const key = t.value as string;
        if (key === 'users') {
          // seed-format.md rule 1: users come before books.
          if (seenBooks) throw new SeedError('"users" must come before "books" in the seed file');
          await expect(tokens, 'startArray', '"users"');
          for (let i = 0; ; i++) {
            const first = await tokens.next();
            if (first.name === 'endArray') break;
            const where = `users[${i}]`;
            tokens.where = where;
            await writer.addUser(validateUser(await readValue(tokens, first), where), where);
          }
        } else if (key === 'books') {
          seenBooks = true;
          await expect(tokens, 'startArray', '"books"');
          for (let i = 0; ; i++) {
            const first = await tokens.next();
            if (first.name === 'endArray') break;
            if (first.name !== 'startObject') throw new SeedError(`books[${i}]: must be an object`);
            tokens.where = `books[${i}]`;
            await readBook(tokens, writer, `books[${i}]`, opts);
          }
        } else {
          // Unknown top-level keys are skipped, value and all.
          await readValue(tokens, await tokens.next());
        }
        tokens.where = 'seed file';
      }
      // Trailing garbage makes the whole file bad: read to the end before committing (seed-format.md rule 6).
      await tokens.end();
      return writer.finish();
    });
  } catch (err) {
    tokenStream.destroy();
    if (err instanceof Error && !(err instanceof SeedError) && /JSON|parser|Unexpected|token/i.test(err.message)) {
      // The parser reads ahead of the records, so the error lies at or after the record being read.
      const at = tokens.where === 'seed file' ? '' : ` (at or after ${tokens.where})`;
      throw new SeedError(`not valid JSON${at}: ${err.message}`);
    }
    throw err;
  }
}

async function readBook(tokens: Tokens, writer: SeedWriter, path: string, opts: LoadOptions): Promise<void> {
  const fields: Record<string, unknown> = {};
  let docCount = 0;
  for (;;) {
    const t = await tokens.next();
    if (t.name === 'endObject') break;
    const key = t.value as string;
    if (key !== 'documents') {
      fields[key] = await readValue(tokens, await tokens.next());
      continue;
    }
    const bookId = fields.id;
    if (typeof bookId !== 'string' || bookId === '') {
      throw new SeedError(`${path}: "id" must come before "documents" (documents are streamed, not held)`);
    }
    await expect(tokens, 'startArray', `${path}.documents`);
    for (;;) {
      const first = await tokens.next();
      if (first.name === 'endArray') break;
      const where = `${path}.documents[${docCount}]`;
      tokens.where = where;
      await writer.addDocument(bookId, validateDocument(await readValue(tokens, first), where));
      docCount++;
      opts.onProgress?.(writer.summary);
    }
    tokens.where = path;
  }
  await writer.addBook(validateBook(fields, path), path);
}
