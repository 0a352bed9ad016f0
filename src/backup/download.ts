/**
 * One attempt at a backup: the export requested with undici (JSON or NDJSON, compressed in transit
 * when the server offers it, `If-None-Match` with `--if-changed`), decoded, verified as it streams
 * (verify.ts) and written to the output (output.ts), which is committed only when the body is whole.
 */
import { pipeline } from 'node:stream/promises';
import { PassThrough, Transform } from 'node:stream';
import zlib from 'node:zlib';
import { request } from 'undici';
import { openOutput } from './output.js';
import { bodyVerifier, incompleteReason, type BackupFormat } from './verify.js';

interface AttemptOptions {
  url: string;
  key: string;
  format: BackupFormat;
  out: string;
  /** The ETag of the last backup, sent as If-None-Match. */
  etag: string | null;
  /** Keep the new ETag in PATH.etag (--if-changed). */
  keepEtag: boolean;
  /** Bounds connecting and each wait for data, seconds. */
  timeoutS: number;
  onBytes?: (bytes: number) => void;
}

/** How an attempt ended. `retryAfterS` comes from the server's Retry-After. */
export type AttemptResult =
  | { kind: 'written'; documents: number; bytes: number; etag: string | null }
  | { kind: 'unchanged'; etag: string }
  | { kind: 'refused'; status: number; code: string; message: string; retryAfterS: number | null }
  | { kind: 'broken'; reason: string };

type ZstdZlib = typeof zlib & { createZstdDecompress?: () => Transform };
const ACCEPT_ENCODING = typeof (zlib as ZstdZlib).createZstdDecompress === 'function' ? 'zstd, br, gzip' : 'br, gzip';

function decoder(encoding: string | undefined): Transform {
  if (encoding === 'gzip') return zlib.createGunzip();
  if (encoding === 'br') return zlib.createBrotliDecompress();
  if (encoding === 'zstd' && (zlib as ZstdZlib).createZstdDecompress) return (zlib as ZstdZlib).createZstdDecompress!();
  return new PassThrough();
}

const header = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** Runs one attempt. Connection errors come back as `broken`, never thrown. */
export async function attemptBackup(o: AttemptOptions): Promise<AttemptResult> {
  let res;
  try {
    res = await request(o.url, {
      headers: {
        authorization: `Bearer ${o.key}`,
        accept: o.format === 'ndjson' ? 'application/x-ndjson' : 'application/json',
        'accept-encoding': ACCEPT_ENCODING,
        ...(o.etag ? { 'if-none-match': o.etag } : {}),
      },
      headersTimeout: o.timeoutS * 1000,
      bodyTimeout: o.timeoutS * 1000,
    });
  } catch (err) {
    return { kind: 'broken', reason: (err as Error).message };
  }
  const etag = header(res.headers.etag) ?? null;
  if (res.statusCode === 304) {
    await res.body.dump();
    return { kind: 'unchanged', etag: etag ?? o.etag ?? '' };
  }
  if (res.statusCode !== 200) {
    const text = await res.body.text().catch(() => '');
    let envelope: { code?: string; message?: string } = {};
    try {
      envelope = JSON.parse(text) as typeof envelope;
    } catch {
      envelope = { message: text.slice(0, 200) };
    }
    const retryAfter = Number(header(res.headers['retry-after']));
    return {
      kind: 'refused',
      status: res.statusCode,
      code: envelope.code ?? `HTTP_${res.statusCode}`,
      message: envelope.message ?? '',
      retryAfterS: Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : null,
    };
  }
  const output = await openOutput(o.out);
  const verifier = bodyVerifier(o.format);
  let bytes = 0;
  // Every decoded byte goes to the verifier and on to the file, at the pace of the slower.
  const tee = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      bytes += chunk.length;
      o.onBytes?.(bytes);
      if (verifier.write(chunk)) cb(null, chunk);
      else verifier.once('drain', () => cb(null, chunk));
    },
    flush(cb) {
      verifier.end(() => cb());
    },
  });
  verifier.on('error', (err) => tee.destroy(err));
  try {
    await pipeline(res.body, decoder(header(res.headers['content-encoding'])), tee, output.stream);
  } catch (err) {
    await output.abort();
    res.body.destroy();
    return { kind: 'broken', reason: (err as Error).message };
  }
  const verdict = verifier.verdict();
  const why = incompleteReason(verdict);
  if (why !== null) {
    await output.abort();
    return { kind: 'broken', reason: why };
  }
  await output.commit(o.keepEtag ? etag : null);
  return { kind: 'written', documents: verdict.documents, bytes, etag };
}
