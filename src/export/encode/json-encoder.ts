/**
 * A hand-written incremental JSON encoder: the caller appends JSON text piece by piece, as UTF-8
 * bytes or strings, and takes it out in chunks of about `chunkSize` bytes, so a response of any
 * size is written with bounded memory. Strings are escaped by V8's JSON.stringify (quotes,
 * backslashes, control characters and lone surrogates; U+2028/2029 stay literal, which JSON allows)
 * or, for document columns, by PostgreSQL's `to_json` (query.ts).
 */

/** Buffers JSON text and hands it out in chunks of bytes. */
export class JsonChunker {
  private parts: Buffer[] = [];
  private bytes = 0;

  /** @param chunkSize bytes after which `full` turns true. */
  constructor(readonly chunkSize = 64 * 1024) {}

  /** Appends JSON text, already encoded; strings are taken as UTF-8. */
  push(text: Buffer | string): void {
    const b = typeof text === 'string' ? Buffer.from(text) : text;
    if (b.length === 0) return;
    this.parts.push(b);
    this.bytes += b.length;
  }

  /** Whether a chunk's worth of bytes is waiting. */
  get full(): boolean {
    return this.bytes >= this.chunkSize;
  }

  /**
   * Takes everything waiting as chunks to write in order: each run of parts smaller than
   * chunkSize joined into one Buffer, each larger part passed on as it is, so a document of
   * megabytes is never copied into a chunk (decisions.md D8.4: memory a small constant times the
   * largest document).
   */
  takeChunks(): Buffer[] {
    const out: Buffer[] = [];
    let run: Buffer[] = [];
    let runBytes = 0;
    const endRun = () => {
      if (run.length > 0) out.push(run.length === 1 ? run[0]! : Buffer.concat(run, runBytes));
      run = [];
      runBytes = 0;
    };
    for (const part of this.parts) {
      if (part.length >= this.chunkSize) {
        endRun();
        out.push(part);
      } else {
        run.push(part);
        runBytes += part.length;
      }
    }
    endRun();
    this.parts = [];
    this.bytes = 0;
    return out;
  }

}
