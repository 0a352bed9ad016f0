/** Compressed bodies (D9.3), flushed each batch; on failure destroyed unfinished, so a decompressor fails (D6.3). */
import { ClientGoneError } from '../../errors.js';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import type { ContentEncoding } from '../request/negotiate.js';
import { type ResponseWriter } from './response-writer.js';

type ZstdZlib = typeof zlib & {
  createZstdCompress?: (opts?: object) => zlib.Gzip;
  constants: typeof zlib.constants & { ZSTD_e_flush?: number; ZSTD_c_compressionLevel?: number };
};
const z = zlib as ZstdZlib;

interface Compressor {
  stream: zlib.Gzip | zlib.BrotliCompress;
  flushKind: number;
}

function compressor(encoding: Exclude<ContentEncoding, 'identity'>): Compressor {
  if (encoding === 'gzip') return { stream: zlib.createGzip({ level: 4 }), flushKind: zlib.constants.Z_SYNC_FLUSH };
  if (encoding === 'br') {
    const params = {
      [zlib.constants.BROTLI_PARAM_QUALITY]: 4,
      [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
    };
    return { stream: zlib.createBrotliCompress({ params }), flushKind: zlib.constants.BROTLI_OPERATION_FLUSH };
  }
  const level = z.constants.ZSTD_c_compressionLevel;
  const stream = z.createZstdCompress!(level === undefined ? {} : { params: { [level]: 3 } });
  return { stream, flushKind: z.constants.ZSTD_e_flush ?? 1 };
}

export interface BodySink {
  /** Resolves when more may be written; `written` once nothing holds `chunk` any more (never after a failure). */
  write(chunk: Buffer, written?: () => void): Promise<void>;
  flush(): Promise<void>;
  end(): Promise<void>;
  /** Frees the compressor after a failure; the response is destroyed by its owner. */
  destroy(): void;
}

export function bodySink(writer: ResponseWriter, encoding: ContentEncoding): BodySink {
  if (encoding === 'identity') {
    return {
      write: (chunk, written) => writer.write(chunk, written),
      flush: async () => {},
      end: async () => {},
      destroy: () => {},
    };
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
    async write(chunk, written) {
      writer.check();
      // zlib calls back once it consumed all of the chunk's input.
      const cb = written && ((err?: Error | null) => err == null && written());
      if (!stream.write(chunk, cb)) await settled(once(stream, 'drain', { signal: writer.signal }));
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
