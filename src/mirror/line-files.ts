/**
 * Files of JSON lines written and read synchronously, a chunk at a time, for the mirror's tree
 * index on disk (tree.ts): the documents in export order, each folder's children, the folders
 * still to name. A reader reads a byte range of a file, so one file holds many lists.
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs';

/** Appends JSON lines to a new file through a buffer of `chunk` bytes. Throws the file system's errors. */
export class LineWriter {
  readonly fd: number;
  private parts: string[] = [];
  private pending = 0;
  /** Bytes written to the file so far (flushed or not). */
  offset = 0;

  constructor(
    file: string,
    private readonly chunk = 64 * 1024,
  ) {
    this.fd = openSync(file, 'w+', 0o600);
  }

  /** Appends one value as a line; the line's bytes count in `offset`. */
  write(value: unknown): void {
    const line = `${JSON.stringify(value)}\n`;
    this.parts.push(line);
    const bytes = Buffer.byteLength(line);
    this.pending += bytes;
    this.offset += bytes;
    if (this.pending >= this.chunk) this.flush();
  }

  /** Writes what is buffered, so a reader of the same file sees it. */
  flush(): void {
    if (this.pending === 0) return;
    const buf = Buffer.from(this.parts.join(''));
    let done = 0;
    while (done < buf.length)
      done += writeSync(this.fd, buf, done, buf.length - done, this.offset - this.pending + done);
    this.parts = [];
    this.pending = 0;
  }

  /** Writes what is buffered and closes the file. */
  close(): void {
    this.flush();
    closeSync(this.fd);
  }
}

/** Reads the JSON lines of bytes [start, end) of an open file, `chunk` bytes at a time. */
export class LineReader<T> {
  private buf: Buffer;
  private rest = Buffer.alloc(0);
  private queue: string[] = [];
  private at: number;

  constructor(
    private readonly fd: number,
    start: number,
    private end: number,
    chunk = 64 * 1024,
  ) {
    this.at = start;
    this.buf = Buffer.alloc(chunk);
  }

  /** Reads further than `end`, for a file that grew since (a queue). */
  extend(end: number): void {
    this.end = end;
  }

  /** The next value, or undefined at the range's end. */
  next(): T | undefined {
    while (this.queue.length === 0) {
      if (this.at >= this.end) return undefined;
      const n = readSync(this.fd, this.buf, 0, Math.min(this.buf.length, this.end - this.at), this.at);
      if (n === 0) throw new Error(`a list of the mirror's index ends early at byte ${this.at}`);
      this.at += n;
      const data = Buffer.concat([this.rest, this.buf.subarray(0, n)]);
      const last = data.lastIndexOf(10);
      if (last === -1) {
        this.rest = data;
        continue;
      }
      this.queue = data.toString('utf8', 0, last).split('\n').reverse();
      this.rest = Buffer.from(data.subarray(last + 1));
    }
    return JSON.parse(this.queue.pop()!) as T;
  }
}
