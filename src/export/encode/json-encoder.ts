/** An incremental JSON encoder: text appended piece by piece, taken out in chunks, so memory stays bounded. */

/** Largest buffer a chunk is filled in, whatever chunkSize: a chunkSize above it takes several. */
const MAX_CHUNK_BYTES = 256 * 1024;

/**
 * Small pieces are copied into the buffer being filled; a piece of a buffer's size or more goes on
 * uncopied (D8.4). `chunkSize` is in bytes: `full` says when that many wait to be taken.
 */
export class JsonChunker {
  #chunk: Buffer | null = null;
  #used = 0;
  #ready: Buffer[] = [];
  #readyBytes = 0;
  /** Bytes of each buffer pieces are copied into. */
  readonly #bufferBytes: number;

  constructor(readonly chunkSize = 64 * 1024) {
    this.#bufferBytes = Math.min(chunkSize, MAX_CHUNK_BYTES);
  }

  push(text: Buffer | string): void {
    const b = typeof text === 'string' ? Buffer.from(text) : text;
    this.pushRange(b, 0, b.length);
  }

  /** Appends `b[start, end)`: a view is made only of a range that goes on uncopied. */
  pushRange(b: Buffer, start: number, end: number): void {
    const n = end - start;
    if (n <= 0) return;
    // A buffer's size, not chunkSize: above MAX_CHUNK_BYTES, a piece between the two would not fit the buffer it is copied into.
    if (n >= this.#bufferBytes) {
      this.#endChunk();
      const whole = n === b.length ? b : b.subarray(start, end);
      this.#ready.push(whole);
      this.#readyBytes += n;
      return;
    }
    if (this.#chunk !== null && this.#used + n > this.#chunk.length) {
      this.#endChunk();
      // What is left of the chunk after the part handed out may still be too small.
      if (this.#chunk !== null && n > this.#chunk.length) this.#chunk = null;
    }
    this.#chunk ??= Buffer.allocUnsafeSlow(this.#bufferBytes);
    b.copy(this.#chunk, this.#used, start, end);
    this.#used += n;
  }

  get full(): boolean {
    return this.#readyBytes + this.#used >= this.chunkSize;
  }

  takeChunks(): Buffer[] {
    this.#endChunk();
    const out = this.#ready;
    this.#ready = [];
    this.#readyBytes = 0;
    return out;
  }

  #endChunk(): void {
    if (this.#chunk === null || this.#used === 0) return;
    const filled = this.#used === this.#chunk.length ? this.#chunk : this.#chunk.subarray(0, this.#used);
    this.#ready.push(filled);
    this.#readyBytes += filled.length;
    // What was handed out stays as it is: the rest of this chunk is not written into again.
    this.#chunk = this.#used === this.#chunk.length ? null : this.#chunk.subarray(this.#used);
    this.#used = 0;
    if (this.#chunk !== null && this.#chunk.length < 512) this.#chunk = null;
  }
}
