/** Content negotiation (D9.3, D9.4): NDJSON only when preferred; encoding by q-value, ties to zstd, br, gzip. */
import Negotiator from 'negotiator';
import type { IncomingHttpHeaders } from 'node:http';
import zlib from 'node:zlib';

/** The two body shapes, one JSON object (export-api.md 4.1) or NDJSON (D9.4). */
export type BodyFormat = 'json' | 'ndjson';

export const MEDIA_TYPES: Readonly<Record<BodyFormat, string>> = {
  json: 'application/json',
  ndjson: 'application/x-ndjson',
};

export type ContentEncoding = 'zstd' | 'br' | 'gzip' | 'identity';

/** The encodings this runtime can produce, in the server's order of preference for equal q-values. */
export const ENCODINGS: readonly ContentEncoding[] = [
  ...(typeof (zlib as { createZstdCompress?: unknown }).createZstdCompress === 'function' ? (['zstd'] as const) : []),
  'br',
  'gzip',
  'identity',
];

export function bodyFormatOf(headers: IncomingHttpHeaders): BodyFormat {
  const preferred = new Negotiator({ headers }).mediaType([MEDIA_TYPES.json, MEDIA_TYPES.ndjson]);
  return preferred === MEDIA_TYPES.ndjson ? 'ndjson' : 'json';
}

export function contentEncodingOf(headers: IncomingHttpHeaders): ContentEncoding {
  // negotiator 1.x takes the server's preference for equal q-values; @types/negotiator predates it.
  const negotiator = new Negotiator({ headers }) as unknown as {
    encoding(available: string[], options: { preferred: string[] }): string | undefined;
  };
  const chosen = negotiator.encoding([...ENCODINGS], { preferred: [...ENCODINGS] });
  return (ENCODINGS as readonly string[]).includes(chosen ?? '') ? (chosen as ContentEncoding) : 'identity';
}
