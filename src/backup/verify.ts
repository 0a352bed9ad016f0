/**
 * Checks an export body as it streams, with memory bounded by one document (export-api.md 4.1,
 * decisions.md D6.3, D9.4): well-formed, `success: true`, and a `meta.count` equal to the documents
 * counted. JSON is read with stream-json's token stream (documents are counted, never assembled);
 * NDJSON line by line.
 */
import { Writable } from 'node:stream';
import { parser } from 'stream-json';

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

/** A verifier for a JSON body: one object whose `documents` array holds the documents. */
function jsonVerifier(): BodyVerifier {
  const tokens = parser.asStream();
  let depth = 0;
  let key: string | null = null;
  let inDocuments = false;
  let documents = 0;
  let count: number | null = null;
  let success = false;
  let metaOpen = false;
  tokens.on('data', (t: { name: string; value?: unknown }) => {
    switch (t.name) {
      case 'startObject':
      case 'startArray':
        if (inDocuments && depth === 2 && t.name === 'startObject') documents++;
        if (depth === 1 && key === 'documents' && t.name === 'startArray') inDocuments = true;
        if (depth === 1 && key === 'meta' && t.name === 'startObject') metaOpen = true;
        depth++;
        key = null;
        break;
      case 'endObject':
      case 'endArray':
        depth--;
        if (depth === 1) inDocuments = metaOpen = false;
        break;
      case 'keyValue':
        key = t.value as string;
        break;
      case 'trueValue':
        if (depth === 1 && key === 'success') success = true;
        break;
      case 'numberValue':
        if (metaOpen && depth === 2 && key === 'count') count = Number(t.value);
        break;
      default:
    }
  });
  const done = new Promise<void>((resolve, reject) => tokens.on('end', resolve).on('error', reject));
  done.catch(() => {});
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (tokens.write(chunk)) cb();
      else tokens.once('drain', () => cb());
    },
    final(cb) {
      tokens.end();
      done.then(() => cb(), cb);
    },
  }) as BodyVerifier;
  tokens.on('error', (err) => sink.destroy(err));
  tokens.resume();
  sink.verdict = () => ({ documents, count, success });
  return sink;
}

/** A verifier for NDJSON: the book line, one document per line, `{"meta":{"count":N}}` last. */
function ndjsonVerifier(maxLineBytes = 512 * 1024 * 1024): BodyVerifier {
  let partial: Buffer[] = [];
  let partialBytes = 0;
  let line = 0;
  let documents = 0;
  let count: number | null = null;
  let success = false;
  const take = (bytes: Buffer) => {
    const record = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    if (count !== null) throw new Error('a line after the meta line');
    if (line++ === 0) success = record.success === true;
    else if ('meta' in record) count = Number((record.meta as { count?: unknown }).count);
    else documents++;
  };
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      try {
        let from = 0;
        for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, from)) {
          partial.push(chunk.subarray(from, nl));
          take(Buffer.concat(partial));
          partial = [];
          partialBytes = 0;
          from = nl + 1;
        }
        if (from < chunk.length) {
          partial.push(chunk.subarray(from));
          partialBytes += chunk.length - from;
          if (partialBytes > maxLineBytes) throw new Error('a line longer than any document');
        }
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
    final(cb) {
      cb(partialBytes > 0 ? new Error('the body ends inside a line') : null);
    },
  }) as BodyVerifier;
  sink.verdict = () => ({ documents, count, success });
  return sink;
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
