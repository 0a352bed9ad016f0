/**
 * Where a backup is written: a temporary file beside `PATH`, compressed when `PATH` ends in `.gz`,
 * `.br` (or `.zst` where the runtime has zstd), fsynced and renamed over `PATH` only once the body
 * was verified whole, together with `PATH.etag` (also written to a temporary file and renamed).
 * Anything else removes the temporary files and leaves an existing `PATH` as it was. `-` writes to
 * standard output, where nothing can be taken back: the exit code tells a whole body from a broken one.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { Writable, type Transform } from 'node:stream';
import { finished } from 'node:stream/promises';
import zlib from 'node:zlib';

type ZstdZlib = typeof zlib & { createZstdCompress?: () => Transform };

/** The compressor a file name asks for, or null for a plain file. Throws on `.zst` without zstd. */
function compressorFor(file: string): Transform | null {
  if (file.endsWith('.gz')) return zlib.createGzip({ level: 6 });
  if (file.endsWith('.br')) return zlib.createBrotliCompress({ params: { [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT } });
  if (file.endsWith('.zst')) {
    const zstd = (zlib as ZstdZlib).createZstdCompress;
    if (typeof zstd !== 'function') throw new Error('.zst needs a Node.js with zstd (22.15 or later)');
    return zstd();
  }
  return null;
}

interface BackupOutput {
  /** The stream the decoded body is written to. */
  readonly stream: Writable;
  /** Makes the body (and `etag`, when given) durable under their final names. */
  commit(etag: string | null): Promise<void>;
  /** Removes whatever was written; an existing `PATH` stays as it was. */
  abort(): Promise<void>;
}

/** The ETag file kept beside a backup for `--if-changed`. */
export const etagFileOf = (file: string) => `${file}.etag`;

/** Opens the output for one attempt. Throws when the folder cannot take a file. */
export async function openOutput(file: string): Promise<BackupOutput> {
  if (file === '-') return stdoutOutput();
  const dir = path.dirname(path.resolve(file));
  const tmp = path.join(dir, `.${path.basename(file)}.${randomBytes(4).toString('hex')}.tmp`);
  const handle = await open(tmp, 'wx', 0o600);
  const fileStream = fs.createWriteStream('', { fd: handle.fd, autoClose: false });
  const compressor = compressorFor(file);
  if (compressor) compressor.pipe(fileStream);
  const stream = compressor ?? fileStream;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close();
  };
  return {
    stream,
    async commit(etag) {
      stream.end();
      await finished(fileStream);
      await handle.sync();
      await close();
      // Never a new ETag beside an old body (a later --if-changed would keep the old body): the body
      // first, then its ETag; an ETag that no longer applies goes before the body changes.
      if (etag === null) await rm(etagFileOf(file), { force: true });
      await rename(tmp, file);
      await syncDir(dir);
      if (etag !== null) await writeAtomically(etagFileOf(file), `${etag}\n`);
    },
    async abort() {
      stream.destroy();
      fileStream.destroy();
      await close().catch(() => {});
      await rm(tmp, { force: true });
    },
  };
}

async function writeAtomically(file: string, text: string): Promise<void> {
  const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  const handle = await open(tmp, 'wx', 0o600);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(tmp, file);
}

/** The rename is durable only once the folder's entry is. */
async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r').catch(() => null);
  if (handle === null) return;
  await handle.sync().catch(() => {});
  await handle.close();
}

function stdoutOutput(): BackupOutput {
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (process.stdout.write(chunk)) cb();
      else process.stdout.once('drain', () => cb());
    },
  });
  return {
    stream,
    async commit() {
      stream.end();
      await finished(stream);
    },
    async abort() {
      stream.destroy();
    },
  };
}
