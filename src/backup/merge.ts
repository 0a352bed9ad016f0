/**
 * The merge of an incremental backup (D12.2): the old file's documents minus the
 * delta's removed and changed ids, with the delta's documents inserted in export order (orderKey,
 * then id, compared byte-wise: D1), framed as the server frames a full export
 * (body-format.ts) with the delta's book and a new `meta.count`. Every document keeps the bytes the
 * server wrote (raw-split.ts), so the result equals a full export of the delta's snapshot byte for
 * byte. Both inputs are read as streams: memory holds a document from each and the delta's ids.
 */
import { createReadStream } from 'node:fs';
import { FRAMING } from '../export/encode/body-format.js';
import { decompressed } from './export-reader.js';
import { RawExportSplitter, RawSplitError } from './raw-split.js';
import type { BackupFormat } from './verify.js';

/** A document's JSON text with its place in the export order. */
export interface RawDocument {
  raw: Buffer;
  id: string;
  key: Buffer;
}

const ID = Buffer.from('{"id":"');
const ORDER_KEY = Buffer.from(',"orderKey":"');

/** The JSON string starting at `at` (its opening quote), decoded, and where it ends; null when it does not end in `raw`. */
function jsonStringAt(raw: Buffer, at: number): string | null {
  let i = at + 1;
  while (i < raw.length) {
    const c = raw[i]!;
    if (c === 0x22) return JSON.parse(raw.toString('utf8', at, i + 1)) as string;
    i += c === 0x5c ? 2 : 1;
  }
  return null;
}

/**
 * A document's id and orderKey, read from the head of its JSON text: the export writes `id` first
 * and `orderKey` before any object or array (D2.5), and outside a string `,"orderKey":"`
 * can only be that key (a quote inside a string is escaped). Anything else is parsed in full.
 */
function idAndOrderKey(raw: Buffer): { id?: unknown; orderKey?: unknown } {
  const at = raw.indexOf(ORDER_KEY);
  if (raw.subarray(0, ID.length).equals(ID) && at > 0) {
    const id = jsonStringAt(raw, ID.length - 1);
    const orderKey = jsonStringAt(raw, at + ORDER_KEY.length - 1);
    if (id !== null && orderKey !== null) return { id, orderKey };
  }
  return JSON.parse(raw.toString()) as { id?: unknown; orderKey?: unknown };
}

/** The order key of a document: orderKey's UTF-8 bytes, a 0 byte, then id's (D1: byte-wise, ties by id). */
export function rawDocument(raw: Buffer): RawDocument {
  const d = idAndOrderKey(raw);
  if (typeof d.id !== 'string' || typeof d.orderKey !== 'string')
    throw new RawSplitError('a document without a string id and orderKey');
  return { raw, id: d.id, key: Buffer.concat([Buffer.from(d.orderKey), Buffer.from([0]), Buffer.from(d.id)]) };
}

/**
 * Whether `a` comes before `b` in the export. The 0 byte between the fields makes one byte-wise
 * comparison the pair's: no orderKey holds a 0 byte, so a shorter orderKey that is a prefix of a
 * longer one compares lower, as PostgreSQL's "C" collation has it.
 */
export const before = (a: RawDocument, b: RawDocument) => Buffer.compare(a.key, b.key) < 0;

/**
 * The documents of an export file (the old backup), decompressed by its name, as they are in it.
 * Throws when it is not a whole export in `format`.
 */
export async function* fileDocuments(file: string, format: BackupFormat): AsyncGenerator<RawDocument> {
  const found: Buffer[] = [];
  const splitter = new RawExportSplitter(format, {
    book() {},
    document: (raw) => found.push(raw),
    removed() {
      throw new RawSplitError(`${file} holds removals: it is not a full export`);
    },
  });
  let documents = 0;
  for await (const chunk of decompressed(file) as AsyncIterable<Buffer>) {
    splitter.write(chunk);
    for (const raw of found) yield rawDocument(raw);
    documents += found.length;
    found.length = 0;
  }
  const count = splitter.end();
  if (count !== documents)
    throw new RawSplitError(`${file}: meta.count is ${count} but it holds ${documents} documents`);
}

/** The lines of a file the merge wrote (the delta's documents, one JSON text a line). */
export async function* spooledDocuments(file: string): AsyncGenerator<RawDocument> {
  let rest: Buffer = Buffer.alloc(0);
  for await (const chunk of createReadStream(file, { highWaterMark: 256 * 1024 }) as AsyncIterable<Buffer>) {
    let data = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
    let nl: number;
    while ((nl = data.indexOf(0x0a)) >= 0) {
      yield rawDocument(data.subarray(0, nl));
      data = data.subarray(nl + 1);
    }
    rest = Buffer.from(data);
  }
  if (rest.length > 0) throw new Error('the spooled delta ends inside a line');
}

interface MergeInput {
  format: BackupFormat;
  /** The delta's book, as the server wrote it. */
  book: Buffer;
  old: AsyncIterable<RawDocument>;
  /** The delta's documents, in export order. */
  changed: AsyncIterable<RawDocument>;
  /** Ids to drop from `old`: the delta's removed and changed ones. */
  drop: (id: string) => boolean;
}

const PIECE = 64 * 1024;

/**
 * The merged body in pieces of about 64 KiB, as a full export of the same snapshot is written.
 * Throws when either input is out of order (a file that is not what its record says).
 */
export async function* mergedBody(m: MergeInput): AsyncGenerator<Buffer> {
  const f = FRAMING[m.format];
  let pending: Buffer[] = [Buffer.from(f.head), m.book, Buffer.from(f.afterBook)];
  let size = 0;
  let count = 0;
  const push = (d: RawDocument) => {
    if (count > 0 && f.between !== null) pending.push(f.between);
    pending.push(d.raw);
    if (f.afterDocument !== null) pending.push(f.afterDocument);
    size += d.raw.length + 1;
    count++;
  };
  const oldIt = m.old[Symbol.asyncIterator]();
  const newIt = m.changed[Symbol.asyncIterator]();
  const nextOld = async (): Promise<RawDocument | null> => {
    for (;;) {
      const r = await oldIt.next();
      if (r.done) return null;
      if (!m.drop(r.value.id)) return r.value;
    }
  };
  const nextNew = async () => {
    const r = await newIt.next();
    return r.done ? null : r.value;
  };
  let a = await nextOld();
  let b = await nextNew();
  let last: RawDocument | null = null;
  while (a !== null || b !== null) {
    const takeOld = b === null || (a !== null && before(a, b));
    const d = takeOld ? a! : b!;
    if (last !== null && !before(last, d)) throw new RawSplitError(`the documents are out of export order at ${d.id}`);
    push(d);
    last = d;
    if (takeOld) a = await nextOld();
    else b = await nextNew();
    if (size >= PIECE) {
      yield Buffer.concat(pending);
      pending = [];
      size = 0;
    }
  }
  pending.push(Buffer.from(f.closing(count)));
  yield Buffer.concat(pending);
}
