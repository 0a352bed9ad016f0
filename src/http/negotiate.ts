/**
 * Content negotiation for the export (decisions.md D9.3, D9.4), with the `negotiator` package:
 * the body's format from `Accept` (NDJSON only when the client prefers it to JSON by q-value or
 * order; JSON otherwise, also for an Accept that names neither).
 */
import Negotiator from 'negotiator';
import type { IncomingHttpHeaders } from 'node:http';
import { MEDIA_TYPES, type BodyFormat } from '../export/encode/body-format.js';

/** The export format the request asks for. */
export function bodyFormatOf(headers: IncomingHttpHeaders): BodyFormat {
  const preferred = new Negotiator({ headers }).mediaType([MEDIA_TYPES.json, MEDIA_TYPES.ndjson]);
  return preferred === MEDIA_TYPES.ndjson ? 'ndjson' : 'json';
}
