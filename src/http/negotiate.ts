/**
 * Content negotiation for the export (decisions.md D9.3, D9.4), with the `negotiator` package:
 * the body's format from `Accept` (NDJSON only when the client prefers it to JSON by q-value or
 * order; JSON otherwise, also for an Accept that names neither), and its Content-Encoding from
 * `Accept-Encoding` (by q-value; for equal ones zstd, then br, then gzip; identity when the header
 * is missing or names nothing this runtime can produce).
 */
import Negotiator from 'negotiator';
import type { IncomingHttpHeaders } from 'node:http';
import { MEDIA_TYPES, type BodyFormat } from '../export/encode/body-format.js';
import { ENCODINGS, type ContentEncoding } from '../export/respond/compression.js';

/** The export format the request asks for. */
export function bodyFormatOf(headers: IncomingHttpHeaders): BodyFormat {
  const preferred = new Negotiator({ headers }).mediaType([MEDIA_TYPES.json, MEDIA_TYPES.ndjson]);
  return preferred === MEDIA_TYPES.ndjson ? 'ndjson' : 'json';
}

/** The Content-Encoding to answer the request with. */
export function contentEncodingOf(headers: IncomingHttpHeaders): ContentEncoding {
  // negotiator 1.x takes the server's preference for equal q-values; @types/negotiator predates it.
  const negotiator = new Negotiator({ headers }) as unknown as {
    encoding(available: string[], options: { preferred: string[] }): string | undefined;
  };
  const chosen = negotiator.encoding([...ENCODINGS], { preferred: [...ENCODINGS] });
  return (ENCODINGS as readonly string[]).includes(chosen ?? '') ? (chosen as ContentEncoding) : 'identity';
}
