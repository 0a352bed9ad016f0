/**
 * The streams a downloaded or saved export passes through: a decoder for its Content-Encoding, a
 * byte counter, and a tee to a verifier beside it. Apart from download.ts, so that reading a
 * backup back (verify) loads no HTTP client.
 */
import { PassThrough, Readable, Transform, type Writable } from 'node:stream';
import zlib from 'node:zlib';
import { hasZstd } from './output.js';

/**
 * A decompressor for a response's Content-Encoding (a pass-through for identity). `endsEarly`: a
 * stream that stops inside a block ends the output with what decoded instead of failing; only for
 * bytes whose wholeness is judged otherwise (a cut body, or a JSON text checked to its meta.count).
 */
export function decoder(encoding: string, { endsEarly = false } = {}): Transform {
  const { Z_SYNC_FLUSH, BROTLI_OPERATION_FLUSH } = zlib.constants;
  if (encoding === 'gzip')
    return zlib.createGunzip({ chunkSize: 64 * 1024, ...(endsEarly ? { finishFlush: Z_SYNC_FLUSH } : {}) });
  if (encoding === 'br')
    return zlib.createBrotliDecompress({
      chunkSize: 64 * 1024,
      ...(endsEarly ? { finishFlush: BROTLI_OPERATION_FLUSH } : {}),
    });
  if (encoding === 'zstd' && hasZstd()) {
    const zstd = zlib as unknown as { createZstdDecompress(o: object): Transform; constants: { ZSTD_e_flush: number } };
    return zstd.createZstdDecompress({
      chunkSize: 64 * 1024,
      ...(endsEarly ? { finishFlush: zstd.constants.ZSTD_e_flush } : {}),
    });
  }
  return new PassThrough();
}

/** A Transform that counts the bytes passing through it. */
export function counter(onBytes: (bytes: number) => void): Transform {
  let bytes = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      bytes += chunk.length;
      onBytes(bytes);
      cb(null, chunk);
    },
  });
}

/**
 * Passes every chunk on unchanged and writes it to `side` too, at the pace of the slower of the
 * two; ends once `side` finished. `side` is the first stage of `sideDone`, whose failure fails this.
 */
export function teeTo(side: Writable, sideDone: Promise<void>): Transform {
  const tee = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      if (side.write(chunk)) cb(null, chunk);
      else side.once('drain', () => cb(null, chunk));
    },
    flush(cb) {
      side.end();
      sideDone.then(() => cb(), cb);
    },
    destroy(err, cb) {
      side.destroy();
      cb(err);
    },
  });
  sideDone.catch((err: Error) => tee.destroy(err));
  return tee;
}

/**
 * A response body's chunks, ending where the body fails instead of failing: the stages after it
 * then pass on and write what they hold, where a failure would have dropped it, so a resumed
 * backup keeps every whole document the cut attempt received. `cut()` is the failure, or null
 * when the body ended whole (D13.2).
 */
export function untilCut(body: Readable): { source: Readable; cut(): Error | null } {
  let failure: Error | null = null;
  async function* source(): AsyncGenerator<Buffer> {
    try {
      for await (const chunk of body) yield chunk as Buffer;
    } catch (err) {
      failure = err as Error;
      // A body destroyed with bytes still in its buffer (all of them came before the close was
      // seen): the iterator drops them, read() still gives them.
      for (let chunk = body.read() as Buffer | null; chunk !== null; chunk = body.read() as Buffer | null) yield chunk;
    }
  }
  return { source: Readable.from(source(), { objectMode: false }), cut: () => failure };
}
