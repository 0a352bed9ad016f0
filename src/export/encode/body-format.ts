/**
 * The two shapes of an export body, from one pipeline: one JSON object (export-api.md 4.1), or
 * newline-delimited JSON for line-oriented ETL (decisions.md D9.4): a first line
 * `{"success":true,"book":{…}}`, one document per line, and `{"meta":{"count":N}}` last, the
 * completeness marker. Only the framing around the same encoded book and documents differs.
 */

export type BodyFormat = 'json' | 'ndjson';

/** The media type of each format, as `Accept` names it and `Content-Type` answers it. */
export const MEDIA_TYPES: Readonly<Record<BodyFormat, string>> = {
  json: 'application/json',
  ndjson: 'application/x-ndjson',
};

/** What the export's answers vary by (decisions.md D9.3, D9.4), for caches between it and clients. */
const EXPORT_VARY = 'Accept, Accept-Encoding';

/** Response headers of a successful export (decisions.md D6.5, D9.3, D9.4). */
export function exportHeaders(format: BodyFormat, encoding = 'identity'): Record<string, string> {
  return {
    'content-type': format === 'json' ? 'application/json; charset=utf-8' : MEDIA_TYPES.ndjson,
    'cache-control': 'no-store',
    vary: EXPORT_VARY,
    ...(encoding === 'identity' ? {} : { 'content-encoding': encoding }),
  };
}

/** What goes around the encoded book object and documents. */
export interface Framing {
  /** Before the book object. */
  readonly head: string;
  /** After the book object, before the first document. */
  readonly afterBook: string;
  /** Between two documents. */
  readonly between: Buffer | null;
  /** After each document. */
  readonly afterDocument: Buffer | null;
  /** The end: written only after the snapshot was read in full (decisions.md D6.3). */
  closing(count: number): string;
}

const NEWLINE = Buffer.from('\n');

export const FRAMING: Readonly<Record<BodyFormat, Framing>> = {
  json: {
    head: '{"success":true,"book":',
    afterBook: ',"documents":[',
    between: Buffer.from(','),
    afterDocument: null,
    closing: (count) => `],"meta":{"count":${count}}}`,
  },
  ndjson: {
    head: '{"success":true,"book":',
    afterBook: '}\n',
    between: null,
    afterDocument: NEWLINE,
    closing: (count) => `{"meta":{"count":${count}}}\n`,
  },
};
