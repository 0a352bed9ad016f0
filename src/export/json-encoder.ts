/**
 * A hand-written incremental JSON encoder: the caller appends JSON text piece by piece and takes it
 * out in chunks of about `chunkSize` characters, so a response of any size is written with bounded
 * memory. Strings are escaped by V8's JSON.stringify (quotes, backslashes, control characters and
 * lone surrogates; U+2028/2029 stay literal, which JSON allows).
 */

/** JSON text of a string, or `null`. */
export function jsonString(s: string | null): string {
  return s === null ? 'null' : JSON.stringify(s);
}

/** JSON text of an array of strings, or `null`. */
export function jsonStringArray(a: readonly string[] | null): string {
  if (a === null) return 'null';
  let out = '[';
  for (let i = 0; i < a.length; i++) {
    if (i > 0) out += ',';
    out += JSON.stringify(a[i]);
  }
  return out + ']';
}

/** Buffers JSON text and hands it out in chunks. */
export class JsonChunker {
  private pending = '';

  /** @param chunkSize characters (UTF-16 code units) after which `full` turns true. */
  constructor(readonly chunkSize = 64 * 1024) {}

  /** Appends raw JSON text, already encoded. */
  push(text: string): void {
    this.pending += text;
  }

  /** Whether a chunk's worth of text is waiting. */
  get full(): boolean {
    return this.pending.length >= this.chunkSize;
  }

  /** Characters waiting. */
  get size(): number {
    return this.pending.length;
  }

  /** Takes everything waiting ('' when nothing is). */
  take(): string {
    const out = this.pending;
    this.pending = '';
    return out;
  }
}
