/**
 * Checks an export body as it streams, in constant memory (export-api.md 4.1, D6.3,
 * D9.4): well-formed JSON, `success: true`, and a `meta.count` equal to the documents counted.
 * JSON: one object whose `documents` array holds the documents; NDJSON: the book line, one
 * document per line, `{"meta":{"count":N}}` last. Both read by json-scan.ts, which assembles nothing.
 */
import { Writable } from 'node:stream';
import { JsonScanner, type ScanHandlers } from './json-scan.js';

export type BackupFormat = 'json' | 'ndjson';

/** What a body turned out to be once it ended. */
interface BodyVerdict {
  documents: number;
  count: number | null;
  success: boolean;
}

/** A Writable that verifies what is written to it; `verdict()` after it finished. */
interface BodyVerifier extends Writable {
  verdict(): BodyVerdict;
}

function scanningSink(scanner: JsonScanner, verdict: () => BodyVerdict): BodyVerifier {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      try {
        scanner.write(chunk);
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
    final(cb) {
      try {
        scanner.end();
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
  }) as BodyVerifier;
  sink.verdict = verdict;
  return sink;
}

/** A verifier for a JSON body. */
function jsonVerifier(): BodyVerifier {
  let documents = 0;
  let count: number | null = null;
  let success = false;
  let inDocuments = false;
  let inMeta = false;
  const handlers: ScanHandlers = {
    value(kind, depth, s) {
      if (depth === 1) {
        inDocuments = s.topKey === 'documents' && kind === 'array';
        inMeta = s.topKey === 'meta' && kind === 'object';
        if (s.topKey === 'success' && kind === 'true') success = true;
      } else if (depth === 2) {
        if (inDocuments && kind === 'object') documents++;
        if (inMeta && s.innerKey === 'count' && kind === 'number') return true;
      }
      return false;
    },
    number(text) {
      count = text === null ? NaN : Number(text);
    },
  };
  return scanningSink(new JsonScanner(handlers), () => ({ documents, count, success }));
}

/** A verifier for NDJSON. */
function ndjsonVerifier(): BodyVerifier {
  let line = 0;
  let documents = 0;
  let count: number | null = null;
  let success = false;
  // What the line being read holds at its top level.
  let lineSuccess = false;
  let lineMeta = false;
  let lineCount: number | null = null;
  const handlers: ScanHandlers = {
    value(kind, depth, s) {
      if (count !== null) throw new Error('a line after the meta line');
      if (depth === 1) {
        if (s.topKey === 'success' && kind === 'true') lineSuccess = true;
        if (s.topKey === 'meta') lineMeta = true;
      } else if (depth === 2 && s.topKey === 'meta' && s.innerKey === 'count' && kind === 'number') return true;
      return false;
    },
    number(text) {
      lineCount = text === null ? NaN : Number(text);
    },
    line() {
      if (line++ === 0) success = lineSuccess;
      else if (lineMeta) count = lineCount ?? NaN;
      else documents++;
      lineSuccess = lineMeta = false;
      lineCount = null;
    },
  };
  return scanningSink(new JsonScanner(handlers), () => ({ documents, count, success }));
}

export function bodyVerifier(format: BackupFormat): BodyVerifier {
  return format === 'json' ? jsonVerifier() : ndjsonVerifier();
}

/** Why a verdict is not a whole export, or null when it is. */
export function incompleteReason(v: BodyVerdict): string | null {
  if (!v.success) return 'the body does not start with "success": true';
  if (v.count === null) return 'the body has no meta.count: it was cut short';
  if (v.count !== v.documents) return `meta.count is ${v.count} but ${v.documents} documents arrived`;
  return null;
}
