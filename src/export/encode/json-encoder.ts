/** An incremental JSON encoder: text appended piece by piece, taken out in chunks, so memory stays bounded. */

/** Largest buffer a chunk is filled in, whatever chunkSize: a chunkSize above it takes several. */
const MAX_CHUNK_BYTES = 256 * 1024;
/** Bytes of buffers kept for reuse per chunker: about what a socket's and a compressor's queues hold at once. */
const SPARE_BYTES = 1024 * 1024;

/** A buffer pieces are copied into, and the chunks cut from it still out. */
interface Slab {
  readonly buffer: Buffer;
  readonly out: Set<Buffer>;
  filling: boolean;
  /** A chunk of it is kept by its reader: never filled again. */
  kept: boolean;
}

/**
 * Small pieces are copied into the buffer being filled; a piece of a buffer's size or more goes on
 * uncopied (D8.4). `chunkSize` is in bytes: `full` says when that many wait to be taken. A buffer
 * is filled again once every chunk cut from it was given back with `release`, so an export makes
 * far fewer Buffers for V8 to collect; a chunk never given back is simply garbage.
 */
export class JsonChunker {
  #chunk: Buffer | null = null;
  #slab: Slab | null = null;
  #used = 0;
  #ready: Buffer[] = [];
  #readyBytes = 0;
  /** Bytes of each buffer pieces are copied into. */
  readonly #bufferBytes: number;
  /** Slabs with chunks out, by their memory: a chunk is a view of one. */
  readonly #slabs = new Map<ArrayBufferLike, Slab>();
  readonly #spare: Buffer[] = [];
  readonly #maxSpare: number;

  constructor(readonly chunkSize = 64 * 1024) {
    this.#bufferBytes = Math.min(chunkSize, MAX_CHUNK_BYTES);
    this.#maxSpare = Math.max(4, Math.floor(SPARE_BYTES / this.#bufferBytes));
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
      if (this.#chunk !== null && n > this.#chunk.length) this.#dropChunk();
    }
    if (this.#chunk === null) this.#newChunk();
    b.copy(this.#chunk!, this.#used, start, end);
    this.#used += n;
  }

  get full(): boolean {
    return this.#readyBytes + this.#used >= this.chunkSize;
  }

  /** The chunks ready, in order; each may be given back with `release` once nothing reads it any more. */
  takeChunks(): Buffer[] {
    this.#endChunk();
    const out = this.#ready;
    this.#ready = [];
    this.#readyBytes = 0;
    return out;
  }

  /**
   * Gives back a chunk from `takeChunks` that nothing reads any more (written out, compressed):
   * its buffer is filled again once all its chunks are back. A chunk that went on uncopied, or
   * was given back already, is ignored.
   */
  release(chunk: Buffer): void {
    this.#giveBack(chunk, false);
  }

  /** Says a chunk from `takeChunks` is kept (a cached body): its buffer is never filled again. */
  keep(chunk: Buffer): void {
    this.#giveBack(chunk, true);
  }

  #giveBack(chunk: Buffer, kept: boolean): void {
    const slab = this.#slabs.get(chunk.buffer);
    if (slab === undefined || !slab.out.delete(chunk)) return;
    if (kept) slab.kept = true;
    this.#retire(slab);
  }

  #newChunk(): void {
    const buffer = this.#spare.pop() ?? Buffer.allocUnsafeSlow(this.#bufferBytes);
    this.#slab = { buffer, out: new Set(), filling: true, kept: false };
    this.#slabs.set(buffer.buffer, this.#slab);
    this.#chunk = buffer;
    this.#used = 0;
  }

  /** The buffer being filled takes no more pieces. */
  #dropChunk(): void {
    const slab = this.#slab!;
    this.#chunk = null;
    this.#slab = null;
    this.#used = 0;
    slab.filling = false;
    this.#retire(slab);
  }

  #retire(slab: Slab): void {
    if (slab.out.size > 0 || slab.filling) return;
    this.#slabs.delete(slab.buffer.buffer);
    if (!slab.kept && this.#spare.length < this.#maxSpare) this.#spare.push(slab.buffer);
  }

  #endChunk(): void {
    if (this.#chunk === null || this.#used === 0) return;
    // Always a new view: a late second release of an earlier chunk of a reused buffer cannot match it.
    const filled = this.#chunk.subarray(0, this.#used);
    this.#ready.push(filled);
    this.#readyBytes += filled.length;
    this.#slab!.out.add(filled);
    // What was handed out stays as it is until given back: the rest of this chunk is filled next.
    if (this.#used === this.#chunk.length || this.#chunk.length - this.#used < 512) this.#dropChunk();
    else {
      this.#chunk = this.#chunk.subarray(this.#used);
      this.#used = 0;
    }
  }
}
