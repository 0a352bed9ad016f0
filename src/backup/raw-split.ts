/**
 * Splits an export body (a full export or a delta, JSON or NDJSON: export-api.md 4.1,
 * D9.4, D12.2) into its parts as the bytes the server wrote, fed in pieces: the book's JSON text,
 * each document's JSON text, each removed id, and at the end `meta.count`. An incremental backup copies those
 * bytes as they are, so its file can equal a full backup byte for byte; re-encoding parsed values
 * could not promise that. Memory holds one part at a time (the largest document at most).
 * It checks the framing, not every byte: the parts are parsed by their users and the merged body
 * is verified like a download (verify.ts). Throws `RawSplitError`.
 */
import type { BackupFormat } from './verify.js';

/** A body that is not a whole export in the expected framing. */
export class RawSplitError extends Error {}

/** Where the parts go, in body order: the book first, then documents, then (in a delta) removed ids. */
export interface RawParts {
  book(raw: Buffer): void;
  document(raw: Buffer): void;
  removed(id: string): void;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const NEWLINE = 0x0a;
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

type Capture = 'key' | 'value' | 'element';

/** Feed with `write(chunk)`, then `end()`, which returns `meta.count`, or throws when the body was cut short. */
export class RawExportSplitter {
  private parts: Buffer[] = [];
  private capStart = -1;
  private capture: Capture | null = null;
  private capString = false;
  private capPrimitive = false;
  private capDepth = 0;
  private depth = 0;
  private inString = false;
  private escape = false;
  private expectKey = false;
  private valueDue = false;
  private elementDue = false;
  private array: 'documents' | 'removed' | null = null;
  private topKey = '';
  private success = false;
  private count: number | null = null;
  private done = false;
  private lines = 0;

  constructor(
    private readonly format: BackupFormat,
    private readonly to: RawParts,
  ) {}

  write(chunk: Buffer): void {
    if (this.format === 'ndjson') this.writeLines(chunk);
    else this.writeJson(chunk);
  }

  end(): number {
    if (this.format === 'ndjson' && (this.parts.length > 0 || this.capStart >= 0))
      throw new RawSplitError('the last line has no newline: the body was cut short');
    if (!this.success) throw new RawSplitError('the body does not start with "success": true');
    if (this.count === null || (this.format === 'json' && !this.done))
      throw new RawSplitError('the body has no meta.count: it was cut short');
    return this.count;
  }

  private take(chunk: Buffer, endAt: number): Buffer {
    const last = chunk.subarray(this.capStart, endAt);
    const raw = this.parts.length === 0 ? Buffer.from(last) : Buffer.concat([...this.parts, last]);
    this.parts = [];
    this.capStart = -1;
    return raw;
  }

  private writeLines(chunk: Buffer): void {
    let from = 0;
    for (;;) {
      const nl = chunk.indexOf(NEWLINE, from);
      if (nl < 0) break;
      this.capStart = from;
      this.line(this.take(chunk, nl));
      from = nl + 1;
    }
    if (from < chunk.length) this.parts.push(Buffer.from(chunk.subarray(from)));
  }

  private line(raw: Buffer): void {
    if (this.count !== null) throw new RawSplitError('a line after the meta line');
    if (this.lines++ === 0) {
      const head = '{"success":true,"book":';
      if (!raw.subarray(0, head.length).equals(Buffer.from(head)) || raw[raw.length - 1] !== 0x7d) {
        throw new RawSplitError('the first line is not {"success":true,"book":{…}}');
      }
      this.success = true;
      this.to.book(raw.subarray(head.length, raw.length - 1));
    } else if (startsWith(raw, '{"removed":')) this.to.removed(JSON.parse(raw.toString()).removed as string);
    else if (startsWith(raw, '{"meta":')) this.count = countOf(JSON.parse(raw.toString()).meta);
    else this.to.document(raw);
  }

  private writeJson(chunk: Buffer): void {
    if (this.capStart >= 0) this.capStart = 0;
    const n = chunk.length;
    for (let i = 0; i < n; i++) {
      let c = chunk[i]!;
      if (this.inString) {
        // The hot loop: most of an export's bytes are inside strings.
        if (!this.escape) {
          while (c !== QUOTE && c !== BACKSLASH && ++i < n) c = chunk[i]!;
          if (i === n) break;
        }
        if (this.escape) this.escape = false;
        else if (c === BACKSLASH) this.escape = true;
        else if (c === QUOTE) {
          this.inString = false;
          if (this.capString) this.finish(chunk, i + 1);
        }
        continue;
      }
      if (isSpace(c)) continue;
      if (this.done) throw new RawSplitError('more after the end of the body');
      if (c === QUOTE) {
        this.inString = true;
        if (this.depth === 1 && this.expectKey) {
          this.expectKey = false;
          this.start(i, 'key', 'string');
        } else this.valueStarts(i, 'string');
      } else if (c === 0x7b || c === 0x5b) {
        if (this.depth === 0) {
          if (c !== 0x7b) throw new RawSplitError('the body is not a JSON object');
          this.expectKey = true;
        } else if (
          this.depth === 1 &&
          this.valueDue &&
          c === 0x5b &&
          (this.topKey === 'documents' || this.topKey === 'removed')
        ) {
          this.valueDue = false;
          this.array = this.topKey;
          this.elementDue = true;
        } else this.valueStarts(i, 'container');
        this.depth++;
      } else if (c === 0x7d || c === 0x5d) {
        this.primitiveEnds(chunk, i);
        this.depth--;
        if (this.capture !== null && !this.capString && !this.capPrimitive && this.depth === this.capDepth)
          this.finish(chunk, i + 1);
        if (this.depth === 1 && this.array !== null) this.array = null;
        if (this.depth === 0) this.done = true;
      } else if (c === 0x3a) {
        if (this.depth === 1) this.valueDue = true;
      } else if (c === 0x2c) {
        this.primitiveEnds(chunk, i);
        if (this.depth === 1) this.expectKey = true;
        else if (this.depth === 2 && this.array !== null) this.elementDue = true;
      } else this.valueStarts(i, 'primitive');
    }
    if (this.capStart >= 0) this.parts.push(Buffer.from(chunk.subarray(this.capStart)));
  }

  private valueStarts(i: number, kind: 'string' | 'container' | 'primitive'): void {
    if (this.depth === 1 && this.valueDue) {
      this.valueDue = false;
      this.start(i, 'value', kind);
    } else if (this.depth === 2 && this.array !== null && this.elementDue) {
      this.elementDue = false;
      this.start(i, 'element', kind);
    }
  }

  private start(i: number, what: Capture, kind: 'string' | 'container' | 'primitive'): void {
    this.capture = what;
    this.capStart = i;
    this.capString = kind === 'string';
    this.capPrimitive = kind === 'primitive';
    this.capDepth = this.depth;
  }

  private primitiveEnds(chunk: Buffer, i: number): void {
    if (this.capture !== null && this.capPrimitive && this.depth === this.capDepth) this.finish(chunk, i);
  }

  private finish(chunk: Buffer, endAt: number): void {
    const what = this.capture!;
    this.capture = null;
    const raw = this.take(chunk, endAt);
    if (what === 'key') this.topKey = JSON.parse(raw.toString()) as string;
    else if (what === 'element') {
      if (this.array === 'documents') this.to.document(raw);
      else this.to.removed(JSON.parse(raw.toString()) as string);
    } else if (this.topKey === 'success') this.success = raw.toString().trim() === 'true';
    else if (this.topKey === 'book') {
      if (!this.success) throw new RawSplitError('the body does not start with "success": true');
      this.to.book(raw);
    } else if (this.topKey === 'meta') this.count = countOf(JSON.parse(raw.toString()));
  }
}

const startsWith = (raw: Buffer, text: string) => raw.subarray(0, text.length).toString() === text;

function countOf(meta: unknown): number {
  const count = (meta as { count?: unknown } | null)?.count;
  if (typeof count !== 'number' || !Number.isSafeInteger(count))
    throw new RawSplitError('meta.count is not a whole number');
  return count;
}
