/**
 * Reads an export file back (`kb-export restore`): JSON or NDJSON, plain or compressed by its name
 * (`.gz`, `.br`, `.zst`), one record at a time, so memory stays bounded by the largest document.
 * Refuses a body that does not begin with `"success": true` (an error envelope saved as a backup,
 * or any other file) before anything is read, yields the book first, then each document, and checks
 * at the end that `meta.count` is there and equals the documents read (a truncated backup is
 * refused, never restored in part).
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parser } from 'stream-json';
import { pick } from 'stream-json/filters/pick.js';
import { streamValues } from 'stream-json/streamers/stream-values.js';
import { decoder } from './body-streams.js';
import { fileEncodingOf, hasZstd } from './output.js';

type ExportRecord =
  { kind: 'book'; book: Record<string, unknown> } | { kind: 'document'; document: Record<string, unknown> };

/** A file's bytes, decompressed by its name (`.gz`, `.br`, `.zst`). Throws for .zst without runtime support. */
export function decompressed(file: string): Readable {
  const raw = createReadStream(file);
  const encoding = fileEncodingOf(file);
  if (encoding === null) return raw;
  if (encoding === 'zstd' && !hasZstd()) throw new Error('.zst needs a Node.js with zstd (22.15 or later)');
  const t = decoder(encoding);
  raw.on('error', (err) => t.destroy(err));
  return raw.pipe(t);
}

/** Whether a file holds NDJSON by its name (`.ndjson`, `.jsonl`, before any compression suffix); `restore --format` overrides it. */
function isNdjsonFile(file: string): boolean {
  return /\.(ndjson|jsonl)(\.(gz|br|zst))?$/.test(file);
}

const NOT_AN_EXPORT = 'is not a successful export: it does not begin with "success": true';

/** The records of an export file. Throws when it is not a whole export. */
export async function* readExport(file: string, ndjson = isNdjsonFile(file)): AsyncGenerator<ExportRecord> {
  let documents = 0;
  let count: number | null = null;
  let book = false;
  let success = false;
  const take = function* (value: Record<string, unknown>, where: 'book' | 'document' | 'meta') {
    if (where === 'book') {
      book = true;
      yield { kind: 'book' as const, book: value };
    } else if (where === 'document') {
      if (!book) throw new Error('a document before the book');
      documents++;
      yield { kind: 'document' as const, document: value };
    } else count = Number(value.count);
  };
  if (ndjson) {
    const input = decompressed(file);
    const lines = createInterface({ input, crlfDelay: Infinity });
    // readline does not pass its input's errors on: a cut gzip stream must end the loop with one.
    input.on('error', (err) => lines.emit('error', err));
    let n = 0;
    for await (const line of lines) {
      if (line === '') continue;
      const record = JSON.parse(line) as Record<string, unknown>;
      if (n++ === 0) {
        if (record.success !== true) throw new Error(`${file} ${NOT_AN_EXPORT} on its first line`);
        success = true;
        if (typeof record.book !== 'object' || record.book === null)
          throw new Error(`${file}: the first line has no "book"`);
        yield* take(record.book as Record<string, unknown>, 'book');
      } else if ('meta' in record) yield* take(record.meta as Record<string, unknown>, 'meta');
      else yield* take(record, 'document');
    }
  } else {
    const values = streamValues.asStream();
    // Any stage's error (a file that is not JSON, a cut gzip stream) ends the iteration with it.
    pipeline(
      decompressed(file),
      parser.asStream(),
      pick.asStream({ filter: /^(?:success|book|meta|documents\.\d+)$/ }),
      values,
    ).catch((err: Error) => values.destroy(err));
    for await (const { value } of values as AsyncIterable<{ value: Record<string, unknown> | boolean }>) {
      // pick passes the values in file order: success, the book, the documents, then meta.
      if (!success) {
        if (value !== true) throw new Error(`${file} ${NOT_AN_EXPORT}`);
        success = true;
      } else if (typeof value !== 'object' || value === null)
        throw new Error(`${file}: a book, document or meta that is not an object`);
      else if (!book) yield* take(value, 'book');
      else if (count === null && 'count' in value && !('id' in value)) yield* take(value, 'meta');
      else yield* take(value, 'document');
    }
  }
  if (!success) throw new Error(`${file} ${NOT_AN_EXPORT}`);
  if (!book) throw new Error('no book in the file');
  if (count === null) throw new Error('no meta.count: the export was cut short');
  if (count !== documents) throw new Error(`meta.count is ${count} but the file holds ${documents} documents`);
}
