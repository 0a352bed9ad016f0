/**
 * Where a backup is written: a temporary file beside `PATH`, compressed when `PATH` ends in `.gz`,
 * `.br` (or `.zst` where the runtime has zstd) unless the bytes arrive in that encoding already,
 * fsynced and renamed over `PATH` only once the body was verified whole, then its record
 * `PATH.etag` (record.ts; also a temporary file, fsynced before `PATH` is touched, renamed after).
 * Anything else, a write error included, removes the temporary files and leaves an existing `PATH`
 * as it was. `-` writes to standard output, where nothing can be taken back: the exit code tells a
 * whole body from a broken one.
 */
import { createHash, randomBytes } from 'node:crypto';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { Writable, type Transform } from 'node:stream';
import zlib from 'node:zlib';
import { recordFileOf, recordText, tokenFileOf, tokenRecordText, type TokenOptions } from './record.js';

type ZstdZlib = typeof zlib & {
  createZstdCompress?: (o?: zlib.ZlibOptions) => Transform;
  createZstdDecompress?: () => Transform;
};

/** The compressions a backup file can have, named as HTTP content codings. */
export type FileEncoding = 'gzip' | 'br' | 'zstd';

/** An error writing the backup's own files (a full disk, an I/O error, no permission): retrying cannot help. */
export class OutputError extends Error {}

/** Whether this runtime has zstd (Node.js 22.15 and later). */
export const hasZstd = () =>
  typeof (zlib as ZstdZlib).createZstdCompress === 'function' &&
  typeof (zlib as ZstdZlib).createZstdDecompress === 'function';

/** The compression a file's name asks for (`.gz`, `.br`, `.zst`), or null for a plain file and `-`. */
export function fileEncodingOf(file: string): FileEncoding | null {
  if (file.endsWith('.gz')) return 'gzip';
  if (file.endsWith('.br')) return 'br';
  if (file.endsWith('.zst')) return 'zstd';
  return null;
}

/**
 * The compressor for a file's encoding: gzip 6, brotli 6, zstd 3; with `asServer` the server's
 * levels (gzip 4, brotli 4), for a merged file that stands in for the server's bytes. Throws on zstd
 * without runtime support.
 */
function compressorFor(encoding: FileEncoding, asServer = false): Transform {
  const chunkSize = 64 * 1024;
  if (encoding === 'gzip') return zlib.createGzip({ level: asServer ? 4 : 6, chunkSize });
  if (encoding === 'br') {
    // Brotli's default quality (11) compresses well under 1 MB/s: far slower than any export.
    const params = {
      [zlib.constants.BROTLI_PARAM_QUALITY]: asServer ? 4 : 6,
      [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
    };
    return zlib.createBrotliCompress({ chunkSize, params });
  }
  if (!hasZstd()) throw new Error('.zst needs a Node.js with zstd (22.15 or later)');
  return (zlib as ZstdZlib).createZstdCompress!({ chunkSize });
}

/** A change token to keep beside the body, with the options it was issued for. */
export interface KeptToken {
  token: string;
  options: TokenOptions;
}

interface BackupOutput {
  /** The last stages of the attempt's pipeline, in order: the compressor (when one is needed) and the file. */
  readonly stages: [Writable] | [Transform, Writable];
  /** Bytes written to the file so far (compressed ones when it is compressed). */
  written(): number;
  /** SHA-256 (lowercase hex) of the file's bytes once committed; null before, and for standard output. */
  sha256(): string | null;
  /**
   * Makes the body durable under its final name, with its records: `PATH.etag` for an `etag`,
   * `PATH.token` for a `token` (record.ts); a record not asked for is removed. Throws OutputError.
   */
  commit(etag: string | null, token?: KeptToken | null): Promise<void>;
  /** Removes whatever was written; an existing `PATH` stays as it was. Never throws. */
  abort(): Promise<void>;
  /**
   * Stops like abort() but keeps the temporary file with what was written, and returns its path (the
   * caller removes it); null for standard output. Never throws.
   */
  keepPartial(): Promise<string | null>;
}

/**
 * Opens the output for one attempt; `encoded`: the bytes will arrive in the file's encoding
 * already (the server's compressed bytes), so they are written as they are; `asServer`: compress
 * at the server's levels. Throws OutputError
 * when the folder cannot take a file.
 */
export async function openOutput(
  file: string,
  { encoded, asServer = false }: { encoded: boolean; asServer?: boolean },
): Promise<BackupOutput> {
  if (file === '-') return stdoutOutput();
  const encoding = fileEncodingOf(file);
  const dir = path.dirname(path.resolve(file));
  const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(4).toString('hex')}.tmp`);
  const record = recordFileOf(file);
  const recordTmp = `${record}.${randomBytes(4).toString('hex')}.tmp`;
  const tokenFile = tokenFileOf(file);
  const tokenTmp = `${tokenFile}.${randomBytes(4).toString('hex')}.tmp`;
  const handle = await open(tmp, 'wx', 0o600).catch((err: Error) => {
    throw new OutputError(`cannot write ${file}: ${err.message}`);
  });
  const sink = fileSink(handle, file);
  const stages: [Writable] | [Transform, Writable] =
    encoding !== null && !encoded ? [compressorFor(encoding, asServer), sink] : [sink];
  let closed = false;
  let committed: string | null = null;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close();
  };
  const failed = (err: unknown) =>
    err instanceof OutputError ? err : new OutputError(`cannot write ${file}: ${(err as Error).message}`);
  return {
    stages,
    written: () => sink.size,
    sha256: () => committed,
    async commit(etag, token = null) {
      try {
        await handle.sync();
        await close();
        // Every byte is written and synced before PATH is touched: the records' too. Never a new
        // record beside an old body: the body is renamed first, then its records; a record that no
        // longer applies goes before the body changes. A crash between the renames leaves an old
        // record whose size and digest no longer match: the next run starts afresh.
        const size = sink.size;
        const sha256 = sink.digest();
        if (etag !== null) await writeDurably(recordTmp, recordText({ etag, size, sha256 }));
        else await rm(record, { force: true });
        if (token !== null) await writeDurably(tokenTmp, tokenRecordText({ ...token, size, sha256 }));
        else await rm(tokenFile, { force: true });
        await rename(tmp, file);
        await syncDir(dir);
        if (etag !== null) await rename(recordTmp, record);
        if (token !== null) await rename(tokenTmp, tokenFile);
        if (etag !== null || token !== null) await syncDir(dir);
        committed = sha256;
      } catch (err) {
        throw failed(err);
      }
    },
    async abort() {
      for (const s of stages) s.destroy();
      await close().catch(() => {});
      await rm(tmp, { force: true }).catch(() => {});
      await rm(recordTmp, { force: true }).catch(() => {});
      await rm(tokenTmp, { force: true }).catch(() => {});
    },
    async keepPartial() {
      for (const s of stages) s.destroy();
      await close().catch(() => {});
      await rm(recordTmp, { force: true }).catch(() => {});
      await rm(tokenTmp, { force: true }).catch(() => {});
      return tmp;
    },
  };
}

interface FileSink extends Writable {
  /** Bytes written. */
  readonly size: number;
  /** SHA-256 (hex) of the bytes written, once they all are. */
  digest(): string;
}

/** A Writable over an open file that counts and hashes what it writes; its errors are OutputErrors. */
function fileSink(handle: FileHandle, file: string): FileSink {
  const hash = createHash('sha256');
  const sink = new Writable({
    highWaterMark: 256 * 1024,
    writev(chunks, cb) {
      const buffers = chunks.map((c) => c.chunk as Buffer);
      for (const b of buffers) hash.update(b);
      writeAll(handle, buffers).then(
        (n) => {
          (sink as { size: number }).size += n;
          cb();
        },
        (err: Error) => cb(new OutputError(`cannot write ${file}: ${err.message}`)),
      );
    },
  }) as FileSink;
  (sink as { size: number }).size = 0;
  sink.digest = () => hash.digest('hex');
  return sink;
}

/** Writes every byte of `buffers` at the file's position, resuming after a short write. Resolves with the bytes written. */
export async function writeAll(handle: FileHandle, buffers: Buffer[]): Promise<number> {
  const total = buffers.reduce((n, b) => n + b.length, 0);
  let left = buffers;
  let done = 0;
  while (done < total) {
    const { bytesWritten } = await handle.writev(left);
    if (bytesWritten === 0) throw new Error('the file system took no bytes');
    done += bytesWritten;
    let skip = bytesWritten;
    while (skip > 0 && skip >= left[0]!.length) skip -= left.shift()!.length;
    if (skip > 0) left = [left[0]!.subarray(skip), ...left.slice(1)];
  }
  return total;
}

/** Writes `text` to a new file and fsyncs it. Throws the file system's error. */
export async function writeDurably(file: string, text: string): Promise<void> {
  const handle = await open(file, 'wx', 0o600);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The rename is durable only once the folder's entry is. */
export async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r').catch(() => null);
  if (handle === null) return;
  await handle.sync().catch(() => {});
  await handle.close();
}

function stdoutOutput(): BackupOutput {
  let size = 0;
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      size += chunk.length;
      if (process.stdout.write(chunk)) cb();
      else process.stdout.once('drain', () => cb());
    },
  });
  // A closed pipe (EPIPE) is a write error like a full disk, not a crash.
  const onError = (err: Error) => stream.destroy(new OutputError(`cannot write to standard output: ${err.message}`));
  process.stdout.on('error', onError);
  stream.once('close', () => process.stdout.off('error', onError));
  return {
    stages: [stream],
    written: () => size,
    sha256: () => null,
    async commit() {},
    async abort() {
      stream.destroy();
    },
    async keepPartial() {
      stream.destroy();
      return null;
    },
  };
}
