/**
 * A map from strings to JSON values kept in two files instead of memory, for what a mirror needs
 * to look up by id, path or slug over millions of documents (D14.6). Values are appended to a
 * data file (a 4-byte length, then the JSON of [key, value]); a slot file is an open-addressing
 * hash table of 8-byte slots (a 6-byte offset into the data, 2 bytes of the key's hash), doubled
 * when half full. Reads and writes are synchronous preads and pwrites, which the page cache
 * answers in microseconds; the last APPEND_BYTES of data and CACHED values stay in memory.
 */
import { closeSync, ftruncateSync, openSync, readSync, renameSync, rmSync, writeSync } from 'node:fs';

const SLOT = 8;
const FIRST_SLOTS = 1 << 14;
/** Values kept in memory after a read or write, with their slot: runs read a document right after writing it. */
const CACHED = 1024;
/** Data appended but not yet written to the file. */
const APPEND_BYTES = 256 * 1024;

/** FNV-1a over the UTF-16 code units of `s`, 32 bits. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The 16 bits of a hash kept in a slot, never 0. */
const tagOf = (h: number) => (h >>> 16) | 1;

/** A string-keyed table on disk; `close()` removes its files. Errors are the file system's, thrown. */
export class DiskTable<V> {
  private readonly data: number;
  private slots: number;
  private capacity = FIRST_SLOTS;
  private used = 0;
  /** Offset of the next record; 1, so that a slot of 0 is empty. */
  private end = 1;
  /** Bytes [flushed, end) are in `pending`. */
  private flushed = 1;
  private pending: Buffer[] = [];
  private readonly slotBuf = Buffer.alloc(SLOT);
  private readBuf = Buffer.alloc(512);
  private readonly cache = new Map<string, { value: V; slot: number }>();

  /** Creates (or empties) `file` and `file.slots`. */
  constructor(private readonly file: string) {
    this.data = openSync(file, 'w+', 0o600);
    this.slots = openSync(`${file}.slots`, 'w+', 0o600);
    ftruncateSync(this.slots, this.capacity * SLOT);
  }

  /** Keys stored. */
  get size(): number {
    return this.used;
  }

  /** The value of `key`, or undefined; shared with a cache, so never to be changed in place. */
  get(key: string): V | undefined {
    const cached = this.cache.get(key);
    if (cached !== undefined) return cached.value;
    const found = this.find(key);
    if (found.offset === 0) return undefined;
    this.remember(key, found.value!, found.slot);
    return found.value;
  }

  /** Whether `key` has a value. */
  has(key: string): boolean {
    return this.cache.has(key) || this.find(key).offset !== 0;
  }

  /** Stores `value` for `key`, replacing any value it had; `value` is not to be changed after. */
  set(key: string, value: V): void {
    const cached = this.cache.get(key);
    const found = cached !== undefined ? { slot: cached.slot, offset: 1 } : this.find(key);
    const offset = this.append(key, value);
    this.writeSlot(this.slots, found.slot, offset, tagOf(hash(key)));
    this.remember(key, value, found.slot);
    if (found.offset !== 0) return;
    this.used++;
    if (this.used * 2 > this.capacity) this.grow();
  }

  /** Removes both files. Never throws. */
  close(): void {
    for (const fd of [this.data, this.slots]) {
      try {
        closeSync(fd);
      } catch {
        // Closed already.
      }
    }
    rmSync(this.file, { force: true });
    rmSync(`${this.file}.slots`, { force: true });
  }

  private remember(key: string, value: V, slot: number): void {
    this.cache.delete(key);
    this.cache.set(key, { value, slot });
    if (this.cache.size > CACHED) this.cache.delete(this.cache.keys().next().value!);
  }

  private find(key: string): { slot: number; offset: number; value?: V } {
    const mask = this.capacity - 1;
    const h = hash(key);
    const tag = tagOf(h);
    for (let slot = h & mask; ; slot = (slot + 1) & mask) {
      const { offset, tag: t } = this.readSlot(this.slots, slot);
      if (offset === 0) return { slot, offset };
      if (t !== tag) continue;
      const [k, value] = this.record(offset);
      if (k === key) return { slot, offset, value };
    }
  }

  private record(offset: number): [string, V] {
    if (offset >= this.flushed) this.flush();
    let n = readSync(this.data, this.readBuf, 0, this.readBuf.length, offset);
    const length = this.readBuf.readUInt32LE(0);
    if (length + 4 > this.readBuf.length) {
      this.readBuf = Buffer.alloc(Math.max(length + 4, this.readBuf.length * 2));
      n = readSync(this.data, this.readBuf, 0, length + 4, offset);
    }
    if (n < length + 4) throw new Error(`${this.file}: a record at ${offset} is cut short`);
    return JSON.parse(this.readBuf.toString('utf8', 4, length + 4)) as [string, V];
  }

  private append(key: string, value: V): number {
    const json = Buffer.from(JSON.stringify([key, value]));
    const head = Buffer.alloc(4);
    head.writeUInt32LE(json.length, 0);
    const offset = this.end;
    this.pending.push(head, json);
    this.end += json.length + 4;
    if (this.end - this.flushed >= APPEND_BYTES) this.flush();
    return offset;
  }

  private flush(): void {
    if (this.pending.length === 0) return;
    const buf = Buffer.concat(this.pending);
    let done = 0;
    while (done < buf.length) done += writeSync(this.data, buf, done, buf.length - done, this.flushed + done);
    this.flushed = this.end;
    this.pending = [];
  }

  private readSlot(fd: number, slot: number): { offset: number; tag: number } {
    const n = readSync(fd, this.slotBuf, 0, SLOT, slot * SLOT);
    if (n < SLOT) return { offset: 0, tag: 0 };
    return { offset: this.slotBuf.readUIntLE(0, 6), tag: this.slotBuf.readUInt16LE(6) };
  }

  private writeSlot(fd: number, slot: number, offset: number, tag: number): void {
    this.slotBuf.writeUIntLE(offset, 0, 6);
    this.slotBuf.writeUInt16LE(tag, 6);
    writeSync(fd, this.slotBuf, 0, SLOT, slot * SLOT);
  }

  /** Doubles the slots: every slot of the old file is placed again in a new one (the cache's slots with it). */
  private grow(): void {
    const old = this.slots;
    const oldCapacity = this.capacity;
    const tmp = `${this.file}.grow`;
    const next = openSync(tmp, 'w+', 0o600);
    this.capacity *= 2;
    ftruncateSync(next, this.capacity * SLOT);
    this.cache.clear();
    const mask = this.capacity - 1;
    const chunk = Buffer.alloc(SLOT * 8192);
    for (let first = 0; first < oldCapacity; first += 8192) {
      const count = Math.min(8192, oldCapacity - first);
      readSync(old, chunk, 0, count * SLOT, first * SLOT);
      for (let i = 0; i < count; i++) {
        const offset = chunk.readUIntLE(i * SLOT, 6);
        if (offset === 0) continue;
        const h = hash(this.record(offset)[0]);
        let slot = h & mask;
        while (this.readSlot(next, slot).offset !== 0) slot = (slot + 1) & mask;
        this.writeSlot(next, slot, offset, tagOf(h));
      }
    }
    closeSync(old);
    // An open descriptor follows its file through a rename.
    renameSync(tmp, `${this.file}.slots`);
    this.slots = next;
  }
}
