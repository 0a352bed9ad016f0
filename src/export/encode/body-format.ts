/** The two body shapes, one JSON object (export-api.md 4.1) or NDJSON (D9.4), differ only in framing. */
import { MEDIA_TYPES, type BodyFormat } from '../request/negotiate.js';

const EXPORT_VARY = 'Accept, Accept-Encoding';

/** Response headers of a successful export (D6.5, D9.3, D9.4). */
export function exportHeaders(format: BodyFormat, encoding = 'identity'): Record<string, string> {
  return {
    'content-type': format === 'json' ? 'application/json; charset=utf-8' : MEDIA_TYPES.ndjson,
    'cache-control': 'no-store',
    vary: EXPORT_VARY,
    ...(encoding === 'identity' ? {} : { 'content-encoding': encoding }),
  };
}

export interface Framing {
  readonly head: string;
  readonly afterBook: string;
  readonly between: Buffer | null;
  readonly afterDocument: Buffer | null;
  /** A delta's removed ids (D12.2): what opens them, what goes before and after each id's JSON text. */
  readonly removedOpen: Buffer;
  readonly removedBefore: Buffer | null;
  readonly removedBetween: Buffer | null;
  readonly removedAfter: Buffer | null;
  /** The end: written only after the snapshot was read in full (D6.3). */
  closing(count: number): string;
}

const NEWLINE = Buffer.from('\n');

export const FRAMING: Readonly<Record<BodyFormat, Framing>> = {
  json: {
    head: '{"success":true,"book":',
    afterBook: ',"documents":[',
    between: Buffer.from(','),
    afterDocument: null,
    // The documents' `]` ends them; the closing's `]` ends the removed ids then.
    removedOpen: Buffer.from('],"removed":['),
    removedBefore: null,
    removedBetween: Buffer.from(','),
    removedAfter: null,
    closing: (count) => `],"meta":{"count":${count}}}`,
  },
  ndjson: {
    head: '{"success":true,"book":',
    afterBook: '}\n',
    between: null,
    afterDocument: NEWLINE,
    removedOpen: Buffer.alloc(0),
    removedBefore: Buffer.from('{"removed":'),
    removedBetween: null,
    removedAfter: Buffer.from('}\n'),
    closing: (count) => `{"meta":{"count":${count}}}\n`,
  },
};
