/**
 * The benchmarks' client side: an export over HTTP (undici) drained while counting bytes, and the
 * database's own limit, `COPY (…) TO STDOUT` of the same rows drained the same way.
 */
import { Agent, request } from 'undici';
import postgres from 'postgres';
import { plainDocumentQuery } from './plain-query.js';

/** One keep-alive agent: connection set-up is not what is measured. */
export const agent = new Agent({ connections: 128, headersTimeout: 600_000, bodyTimeout: 600_000 });

export interface ExportRun {
  /** Request sent to status line and headers received, ms. */
  ttfbMs: number;
  /** Request sent to last body byte, ms. */
  totalMs: number;
  bytes: number;
  /** meta.count read from the body's end; -1 when the body was not read. */
  count: number;
}

const now = () => Number(process.hrtime.bigint()) / 1e6;

/**
 * GETs one export and drains it. Throws on a non-200 status, or a body that does not end with
 * `"meta":{"count":N}}` (a truncated export must never count as a fast one).
 * With `headersOnly`, the body is abandoned after the headers arrive.
 */
export async function exportOnce(
  base: string,
  key: string,
  slug: string,
  opts: { html: boolean; headersOnly?: boolean; path?: string },
): Promise<ExportRun> {
  const url = `${base}${opts.path ?? ''}/api/v1/open/books/${slug}/docs?includeContentHtml=${opts.html}`;
  const t0 = now();
  const res = await request(url, { headers: { authorization: `Bearer ${key}` }, dispatcher: agent });
  const ttfbMs = now() - t0;
  if (res.statusCode !== 200) {
    const text = await res.body.text();
    throw new Error(`GET ${url}: ${res.statusCode} ${text.slice(0, 300)}`);
  }
  if (opts.headersOnly) {
    res.body.destroy();
    return { ttfbMs, totalMs: ttfbMs, bytes: 0, count: -1 };
  }
  let bytes = 0;
  let tail: Buffer = Buffer.alloc(0);
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    tail = chunk.length >= 64 ? chunk.subarray(chunk.length - 64) : Buffer.concat([tail, chunk]).subarray(-64);
  }
  const totalMs = now() - t0;
  const m = /"meta":\{"count":(\d+)\}\}$/.exec(tail.toString('latin1'));
  if (!m) throw new Error(`GET ${url}: the body does not end with meta.count (${bytes} bytes read)`);
  return { ttfbMs, totalMs, bytes, count: Number(m[1]) };
}

export interface CopyRun {
  totalMs: number;
  bytes: number;
}

/**
 * `COPY (SELECT <the exported columns> … in export order) TO STDOUT` for `bookId`, drained to
 * nowhere: the same rows, columns and order as the export (categories excluded, as by default),
 * without HTTP, JSON or rewriting. The database's limit for this data.
 *
 * Each COPY gets a connection of its own, ended afterwards: postgres.js 3.4 can leave a pooled
 * connection's socket paused after a COPY TO STDOUT, and the next query on it never completes.
 */
export async function copyOnce(databaseUrl: string, bookId: string, html: boolean): Promise<CopyRun> {
  return copyQuery(databaseUrl, plainDocumentQuery(bookId, html));
}

/** `COPY (query) TO STDOUT` on a connection of its own (see copyOnce), drained to nowhere. */
export async function copyQuery(databaseUrl: string, query: string): Promise<CopyRun> {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    await sql`SELECT 1`;
    const t0 = now();
    const stream = await sql.unsafe(`COPY (${query}) TO STDOUT`).readable();
    let bytes = 0;
    for await (const chunk of stream as AsyncIterable<Buffer>) bytes += chunk.length;
    return { totalMs: now() - t0, bytes };
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Median of a non-empty list. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}
