/**
 * One attempt at a backup: the export requested with undici (JSON or NDJSON, compressed in transit
 * when the server offers it, `If-None-Match` with `--if-changed`), decoded, verified as it streams
 * (verify.ts) and written to the output (output.ts), which is committed only when the body is whole.
 * When PATH's compression (.gz, .br, .zst) is the response's Content-Encoding, the server's bytes
 * go to the file as they arrive while a decompressed copy of them is verified beside: nothing is
 * compressed twice. Any other encoding is decoded, verified and compressed again for the file.
 */
import { pipeline } from 'node:stream/promises';
import { counter, decoder, teeTo, untilCut } from './body-streams.js';
import { request, type Dispatcher } from 'undici';
import { fileEncodingOf, hasZstd, openOutput, OutputError, type FileEncoding } from './output.js';
import type { TokenOptions } from './record.js';
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
  /** Keep the export's change token in PATH.token, issued for these options (--incremental). */
  keepToken?: TokenOptions | null;
  /** Bounds connecting and each wait for data, seconds. */
  timeoutS: number;
  /** Ask for compression in transit for a plain file (--compressed). */
  compressed?: boolean;
  /** Decoded (JSON) bytes received so far. */
  onBytes?: (bytes: number) => void;
}

/**
 * A full export cut after its first byte: the temporary file with what was written of it (in PATH's
 * encoding), which the caller removes, and the response's change token (D13.2).
 */
export interface CutExport {
  partial: string;
  token: string;
}

/** What an incremental backup merged: the delta's documents and removed ids, and its decoded bytes. */
export interface DeltaSummary {
  changed: number;
  removed: number;
  bytes: number;
}

/** What a file backup keeps of the export beside PATH (manifest.ts): PATH's SHA-256 as written, the change token and Export-Media-Prefix (D13.3). */
export interface WrittenFile {
  sha256: string;
  changeToken: string | null;
  mediaPrefix: string | null;
}

/**
 * How an attempt ended. `retryAfterS` comes from the server's Retry-After; `unwritable` is a
 * failure of the local files (retrying cannot help). `bytes` are decoded (JSON) bytes, `fileBytes`
 * the file's, and `fromServer` the file's compression when it holds the server's bytes.
 */
export type AttemptResult =
  | {
      kind: 'written';
      documents: number;
      bytes: number;
      fileBytes: number;
      fromServer: FileEncoding | null;
      etag: string | null;
      delta?: DeltaSummary;
      file?: WrittenFile;
    }
  | { kind: 'unchanged'; etag: string }
  | { kind: 'refused'; status: number; code: string; message: string; retryAfterS: number | null }
  | { kind: 'broken'; reason: string; cut?: CutExport }
  | { kind: 'unwritable'; reason: string };

/**
 * What the client asks for when it decodes the transfer itself: encodings whose decoder gives out
 * what it has as the bytes arrive. A zstd decoder gives nothing of a block before its end (a whole
 * batch: the server flushes after each), so a cut would lose every document of that batch.
 */
const DECODED_HERE: FileEncoding[] = ['br', 'gzip'];

/**
 * Accept-Encoding: the file's own compression first when it has one (its bytes are kept as sent),
 * then those the client decodes as they come. For a plain file, compression in transit only when
 * `inTransit` (backup --compressed): on a fast link the server's compressing and the client's
 * decoding cost more than the bytes they save.
 */
export function acceptEncoding(file: FileEncoding | null, inTransit = true): string {
  if (file === null && !inTransit) return 'identity';
  if (file === null || (file === 'zstd' && !hasZstd())) return DECODED_HERE.join(', ');
  return [file, ...DECODED_HERE.filter((e) => e !== file).map((e) => `${e};q=0.5`)].join(', ');
}

export const header = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** A refusal's status, the code and message of its error envelope, and Retry-After. */
export async function refusal(res: Dispatcher.ResponseData): Promise<Extract<AttemptResult, { kind: 'refused' }>> {
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

/** What of a cut body the next attempt can resume from: the partial file, with a change token to make it one snapshot. */
async function keptCut(
  output: { abort(): Promise<void>; keepPartial(): Promise<string | null> },
  res: Dispatcher.ResponseData,
): Promise<{ cut?: CutExport }> {
  const token = header(res.headers['export-change-token']);
  if (!token) {
    await output.abort();
    return {};
  }
  const partial = await output.keepPartial();
  return partial === null ? {} : { cut: { partial, token } };
}

/** Runs one attempt. Connection and write errors come back as `broken` and `unwritable`, never thrown. */
export async function attemptBackup(o: AttemptOptions): Promise<AttemptResult> {
  const fileEncoding = o.out === '-' ? null : fileEncodingOf(o.out);
  let res;
  try {
    res = await request(o.url, {
      headers: {
        authorization: `Bearer ${o.key}`,
        accept: o.format === 'ndjson' ? 'application/x-ndjson' : 'application/json',
        'accept-encoding': acceptEncoding(fileEncoding, o.compressed ?? false),
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
  if (res.statusCode !== 200) return refusal(res);
  const contentEncoding = (header(res.headers['content-encoding']) ?? 'identity').trim().toLowerCase();
  const asSent = fileEncoding !== null && contentEncoding === fileEncoding;
  let output;
  try {
    output = await openOutput(o.out, { encoded: asSent });
  } catch (err) {
    res.body.destroy();
    if (err instanceof OutputError) return { kind: 'unwritable', reason: err.message };
    throw err;
  }
  const verifier = bodyVerifier(o.format);
  let bytes = 0;
  const count = counter((n) => {
    bytes = n;
    o.onBytes?.(n);
  });
  // A cut ends the body rather than failing it, so what the stages hold still reaches the file;
  // the verifier then fails on a text cut short, which says nothing the cut did not.
  const body = untilCut(res.body);
  const unlessCut = (verified: Promise<void>) =>
    verified.catch((err: unknown) => {
      if (body.cut() === null) throw err;
    });
  try {
    if (asSent) {
      // The server's bytes to the file; their decompressed copy to the verifier.
      const decode = decoder(contentEncoding);
      const verified = unlessCut(pipeline(decode, count, verifier));
      verified.catch(() => {});
      await pipeline(body.source, teeTo(decode, verified), ...output.stages);
    } else {
      const verified = unlessCut(
        new Promise<void>((resolve, reject) => verifier.once('finish', resolve).once('error', reject)),
      );
      // Decoded for the file, which is whole only when its JSON is: the decoder may end early.
      const decode = decoder(contentEncoding, { endsEarly: true });
      await pipeline(body.source, decode, count, teeTo(verifier, verified), ...output.stages);
    }
  } catch (err) {
    res.body.destroy();
    if (err instanceof OutputError) {
      await output.abort();
      return { kind: 'unwritable', reason: err.message };
    }
    return { kind: 'broken', reason: (body.cut() ?? (err as Error)).message, ...(await keptCut(output, res)) };
  }
  const cut = body.cut();
  if (cut !== null) return { kind: 'broken', reason: cut.message, ...(await keptCut(output, res)) };
  const verdict = verifier.verdict();
  const why = incompleteReason(verdict);
  if (why !== null) return { kind: 'broken', reason: why, ...(await keptCut(output, res)) };
  const token = header(res.headers['export-change-token']);
  try {
    await output.commit(o.keepEtag ? etag : null, o.keepToken && token ? { token, options: o.keepToken } : null);
  } catch (err) {
    await output.abort();
    return { kind: 'unwritable', reason: (err as Error).message };
  }
  const sha256 = output.sha256();
  const file =
    sha256 === null
      ? {}
      : {
          file: { sha256, changeToken: token ?? null, mediaPrefix: header(res.headers['export-media-prefix']) ?? null },
        };
  return {
    kind: 'written',
    documents: verdict.documents,
    bytes,
    fileBytes: output.written(),
    fromServer: asSent ? fileEncoding : null,
    etag,
    ...file,
  };
}
