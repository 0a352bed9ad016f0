/** Encodes the body piece by piece (D2); columns come as JSON text PostgreSQL escaped, copied as bytes. */
import { FRAMING } from './body-format.js';
import type { BodyFormat } from '../request/negotiate.js';
import type { JsonChunker } from './json-encoder.js';
import type { BookRow } from '../request/book.js';
import { DOC, type DocumentRow } from '../snapshot/rows.js';
import { isDirect, type ContentHtmlJson } from '../rewrite/rewrites.js';

function nullable(s: string | null): string {
  return s === null || s === '' ? 'null' : JSON.stringify(s);
}

/** The body up to its first document; book fields in the order of table 2.1 (D2.5). */
export function encodeOpening(book: BookRow, format: BodyFormat = 'json'): string {
  const framing = FRAMING[format];
  return framing.head + encodeBook(book) + framing.afterBook;
}

function encodeBook(book: BookRow): string {
  return (
    '{"id":' +
    JSON.stringify(book.id) +
    ',"slug":' +
    JSON.stringify(book.slug) +
    ',"name":' +
    JSON.stringify(book.name) +
    ',"description":' +
    nullable(book.description) +
    // Book.coverImage is returned as stored (D3.6).
    ',"coverImage":' +
    nullable(book.cover_image) +
    ',"createdAt":' +
    JSON.stringify(book.created_at) +
    ',"updatedAt":' +
    JSON.stringify(book.updated_at) +
    '}'
  );
}

/** The closing with `meta.count`, written only after the snapshot was read in full (D6.3). */
export function encodeClosing(count: number, format: BodyFormat = 'json'): string {
  return FRAMING[format].closing(count);
}

const NULL = Buffer.from('null');
const COVER_URL = Buffer.from('{"url":');
const POSITION = Buffer.from(',"position":');
const END = Buffer.from('}');

/** Appends a document up to its `"contentHtml":` key, in table 2.2's order (D2.5); the caller writes the rest. */
export function encodeDocumentHead(row: DocumentRow, coverUrl: Buffer | null, out: JsonChunker): void {
  out.push(row[DOC.head]);
  const tail = row[DOC.tail];
  if (tail === null) return; // no cover: the head holds its null and the tail (rows.ts)
  if (coverUrl === null) out.push(NULL);
  else {
    out.push(COVER_URL);
    out.push(coverUrl);
    out.push(POSITION);
    out.push(row[DOC.coverPosition]!);
    out.push(END);
  }
  out.push(tail);
}

export const DOCUMENT_END: Buffer = END;

/** contentHtml's stored JSON text as exported: NULL is null (the query made `""` NULL, D2.1). */
export function storedContentHtml(j: Buffer | null): Buffer {
  return j ?? NULL;
}

export function encodeDocument(
  row: DocumentRow,
  coverUrl: Buffer | null,
  out: JsonChunker,
  html: ContentHtmlJson,
): void {
  encodeDocumentHead(row, coverUrl, out);
  if (html === null || Buffer.isBuffer(html)) out.push(storedContentHtml(html));
  else if (isDirect(html)) html.writeTo(out);
  else for (const part of html) out.push(part);
  out.push(END);
}
