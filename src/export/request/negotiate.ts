/** Content negotiation (D9.3, D9.4): NDJSON only when preferred; encoding by q-value, ties to zstd, br, gzip. */
import Negotiator from 'negotiator';
import type { IncomingHttpHeaders } from 'node:http';
import { MEDIA_TYPES, type BodyFormat } from '../encode/body-format.js';
import { ENCODINGS, type ContentEncoding } from '../respond/compression.js';

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
