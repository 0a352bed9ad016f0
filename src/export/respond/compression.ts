/**
 * Compressed export bodies (decisions.md D9.3): gzip and brotli from Node's zlib, zstd where the
 * runtime has it, at levels chosen by bench/compression.ts (bench/RESULTS.md): gzip 4 and brotli 4
 * compress at about 95 MB/s of input on one core, faster than an export with HTML is produced,
 * to 22 % and 15 % of the JSON. The compressed stream is flushed after every batch, so the first
 * documents still arrive early; on a failure the response is destroyed before the stream is
 * finished, so a decompressor fails too (D6.3). Backpressure runs from the client through the
 * ResponseWriter, which counts compressed bytes, to the encoder.
 */
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import { ClientGoneError, type ResponseWriter } from './response-writer.js';

export type ContentEncoding = 'zstd' | 'br' | 'gzip' | 'identity';

type ZstdZlib = typeof zlib & {
  createZstdCompress?: (opts?: object) => zlib.Gzip;
  constants: typeof zlib.constants & { ZSTD_e_flush?: number; ZSTD_c_compressionLevel?: number };
};
const z = zlib as ZstdZlib;

/** The encodings this runtime can produce, in the server's order of preference for equal q-values. */
export const ENCODINGS: readonly ContentEncoding[] = [...(typeof z.createZstdCompress === 'function' ? (['zstd'] as const) : []), 'br', 'gzip', 'identity'];

interface Compressor {
  stream: zlib.Gzip | zlib.BrotliCompress;
  flushKind: number;
}

function compressor(encoding: Exclude<ContentEncoding, 'identity'>): Compressor {
  if (encoding === 'gzip') return { stream: zlib.createGzip({ level: 4 }), flushKind: zlib.constants.Z_SYNC_FLUSH };
  if (encoding === 'br') {
    const params = { [zlib.constants.BROTLI_PARAM_QUALITY]: 4, [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT };
    return { stream: zlib.createBrotliCompress({ params }), flushKind: zlib.constants.BROTLI_OPERATION_FLUSH };
  }
  const level = z.constants.ZSTD_c_compressionLevel;
  const stream = z.createZstdCompress!(level === undefined ? {} : { params: { [level]: 3 } });
  return { stream, flushKind: z.constants.ZSTD_e_flush ?? 1 };
}

/** Where an export body's bytes go: straight to the ResponseWriter, or through a compressor. */
export interface BodySink {
  /** Resolves when more may be written. Rejects with ClientGoneError. */
  write(chunk: Buffer): Promise<void>;
  /** The end of a batch: what was written goes out now. */
  flush(): Promise<void>;
  /** The end of the body (only after the snapshot committed: D6.3). */
  end(): Promise<void>;
  /** Frees the compressor after a failure; the response is destroyed by its owner. */
  destroy(): void;
}

/** A sink for `encoding` writing to `writer`. */
export function bodySink(writer: ResponseWriter, encoding: ContentEncoding): BodySink {
  if (encoding === 'identity') {
    return { write: (chunk) => writer.write(chunk), flush: async () => {}, end: async () => {}, destroy: () => {} };
  }
  const { stream, flushKind } = compressor(encoding);
  const out = new Writable({
    highWaterMark: 0,
    write(chunk: Buffer, _enc, cb) {
      writer.write(chunk).then(() => cb(), cb);
    },
  });
  const piped = pipeline(stream, out);
  piped.catch(() => {});
  const gone = () => new ClientGoneError(writer.reason ?? 'gone');
  const settled = async <T>(work: Promise<T>): Promise<T> => {
    try {
      return await Promise.race([work, piped.then(() => work)]);
    } catch (err) {
      throw err instanceof ClientGoneError ? err : writer.reason !== null ? gone() : err;
    }
  };
  return {
    async write(chunk) {
      writer.check();
      if (!stream.write(chunk)) await settled(once(stream, 'drain', { signal: writer.signal }));
    },
    async flush() {
      writer.check();
      await settled(new Promise<void>((resolve) => stream.flush(flushKind, () => resolve())));
    },
    async end() {
      writer.check();
      stream.end();
      await settled(piped);
    },
    destroy() {
      stream.destroy();
      out.destroy();
    },
  };
}

/** Compresses a whole kept body (the export cache's) as bodySink would stream it. */
export function compressWhole(body: Buffer, encoding: ContentEncoding): Buffer {
  if (encoding === 'identity') return body;
  if (encoding === 'gzip') return zlib.gzipSync(body, { level: 4 });
  if (encoding === 'br') {
    return zlib.brotliCompressSync(body, {
      params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 4, [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT },
    });
  }
  return (z as unknown as { zstdCompressSync(b: Buffer): Buffer }).zstdCompressSync(body);
}
