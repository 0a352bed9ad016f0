/**
 * One attempt at `kb-export backup --incremental` (D12): the delta since the token
 * kept in `PATH.token` (record.ts), merged with the old `PATH` (merge.ts) into the new one, written
 * and verified like a download (output.ts, verify.ts) and committed with the delta's token.
 * The delta is read once, to a temporary file beside `PATH` (its documents, one a line), because its
 * removed ids come last and the old file can be read in order only once they are known. Memory holds
 * the delta's ids (at most MAX_DELTA_IDS: a larger delta costs about what a full export does) and a
 * document at a time. Until the commit nothing but temporary files is written: a crash leaves `PATH`
 * and its records as they were.
 * Results: an `AttemptResult`, or `fallback` when a full export is due (410, a token refused with
 * 400, a delta too large, an old file that cannot be merged), with why.
 */
import { randomBytes } from 'node:crypto';
import { open, rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { request } from 'undici';
import { counter, decoder, teeTo } from './body-streams.js';
import { acceptEncoding, header, refusal, type AttemptResult } from './download.js';
import { before, fileDocuments, mergedBody, rawDocument, spooledDocuments, type RawDocument } from './merge.js';
import { openOutput, OutputError, writeAll } from './output.js';
import { RawExportSplitter, RawSplitError } from './raw-split.js';
import type { TokenOptions } from './record.js';
import { bodyVerifier, incompleteReason, type BackupFormat } from './verify.js';

/** Beyond this many changed and removed ids, a full export replaces the merge. */
export const MAX_DELTA_IDS = 500_000;

interface IncrementalOptions {
  /** The export's URL with its options, without changedSince. */
  url: string;
  key: string;
  format: BackupFormat;
  out: string;
  /** The token of `PATH.token`, which matched PATH. */
  token: string;
  options: TokenOptions;
  timeoutS: number;
  /** Decoded bytes of the delta received so far. */
  onBytes?: (bytes: number) => void;
}

/** How an incremental attempt ended: as a download does, or `fallback` to a full export, with why. */
export type IncrementalResult = AttemptResult | { kind: 'fallback'; why: string };

class Fallback extends Error {}

export interface SpooledDelta {
  book: Buffer;
  token: string;
  mediaPrefix: string | null;
  drop: Set<string>;
  changed: number;
  removed: number;
  bytes: number;
}

/** Runs one attempt. Connection and write errors come back as `broken` and `unwritable`, never thrown. */
export async function attemptIncremental(o: IncrementalOptions): Promise<IncrementalResult> {
  const spool = path.join(
    path.dirname(path.resolve(o.out)),
    `.${path.basename(o.out)}.${randomBytes(4).toString('hex')}.delta.tmp`,
  );
  try {
    const delta = await spoolDelta(o, spool);
    if (delta.kind !== 'spooled') return delta;
    return await mergeDelta(o, fileDocuments(o.out, o.format), spool, delta.delta, o.options);
  } finally {
    await rm(spool, { force: true }).catch(() => {});
  }
}

/** The delta since `o.token`, its documents written to `spool` one a line; `fallback` when the server cannot answer that token. */
export async function spoolDelta(
  o: Omit<IncrementalOptions, 'options'>,
  spool: string,
): Promise<IncrementalResult | { kind: 'spooled'; delta: SpooledDelta }> {
  const url = new URL(o.url);
  url.searchParams.set('changedSince', o.token);
  let res;
  try {
    res = await request(url, {
      headers: {
        authorization: `Bearer ${o.key}`,
        accept: o.format === 'ndjson' ? 'application/x-ndjson' : 'application/json',
        'accept-encoding': acceptEncoding(null),
      },
      headersTimeout: o.timeoutS * 1000,
      bodyTimeout: o.timeoutS * 1000,
    });
  } catch (err) {
    return { kind: 'broken', reason: (err as Error).message };
  }
  if (res.statusCode === 410 || res.statusCode === 400) {
    const r = await refusal(res);
    return {
      kind: 'fallback',
      why: `the server cannot answer changes since the kept token (${r.status} ${r.code}: ${r.message}): a full export`,
    };
  }
  if (res.statusCode !== 200) return refusal(res);
  const token = header(res.headers['export-change-token']);
  if (!token) {
    await res.body.dump();
    return { kind: 'fallback', why: 'the server sent no Export-Change-Token: a full export' };
  }
  const handle = await open(spool, 'wx', 0o600).catch((err: Error) => {
    res.body.destroy();
    return new OutputError(`cannot write beside ${o.out}: ${err.message}`);
  });
  if (handle instanceof OutputError) return { kind: 'unwritable', reason: handle.message };
  const delta: SpooledDelta = {
    book: Buffer.alloc(0),
    token,
    mediaPrefix: header(res.headers['export-media-prefix']) ?? null,
    drop: new Set(),
    changed: 0,
    removed: 0,
    bytes: 0,
  };
  let last: RawDocument | null = null;
  let lines: Buffer[] = [];
  const splitter = new RawExportSplitter(o.format, {
    book: (raw) => {
      delta.book = Buffer.from(raw);
    },
    document: (raw) => {
      const d = rawDocument(raw);
      if (last !== null && !before(last, d))
        throw new RawSplitError(`the delta's documents are out of export order at ${d.id}`);
      last = d;
      delta.drop.add(d.id);
      delta.changed++;
      lines.push(raw, NEWLINE);
    },
    removed: (id) => {
      delta.drop.add(id);
      delta.removed++;
    },
  });
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      try {
        splitter.write(chunk);
        if (delta.drop.size > MAX_DELTA_IDS)
          throw new Fallback(`the delta holds more than ${MAX_DELTA_IDS} changes: a full export`);
      } catch (err) {
        cb(err as Error);
        return;
      }
      const out = lines;
      lines = [];
      if (out.length === 0) cb();
      else
        writeAll(handle, out).then(
          () => cb(),
          (err: Error) => cb(new OutputError(`cannot write beside ${o.out}: ${err.message}`)),
        );
    },
    final(cb) {
      try {
        const count = splitter.end();
        if (count !== delta.changed)
          throw new RawSplitError(`meta.count is ${count} but ${delta.changed} documents arrived`);
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
  });
  const count = counter((n) => {
    delta.bytes = n;
    o.onBytes?.(n);
  });
  try {
    await pipeline(
      res.body,
      decoder((header(res.headers['content-encoding']) ?? 'identity').trim().toLowerCase()),
      count,
      sink,
    );
    await handle.sync();
  } catch (err) {
    res.body.destroy();
    if (err instanceof Fallback) return { kind: 'fallback', why: err.message };
    if (err instanceof OutputError) return { kind: 'unwritable', reason: err.message };
    return { kind: 'broken', reason: `the delta: ${(err as Error).message}` };
  } finally {
    await handle.close().catch(() => {});
  }
  return { kind: 'spooled', delta };
}

const NEWLINE = Buffer.from('\n');

/**
 * Writes `old`'s documents, but for the delta's changed and removed ones, merged in export order with
 * the delta's spooled documents, as PATH (merge.ts), verified and committed; the delta's token is kept
 * for `keep`'s options (--incremental), or none.
 */
export async function mergeDelta(
  o: Pick<IncrementalOptions, 'out' | 'format'>,
  old: AsyncIterable<RawDocument>,
  spool: string,
  delta: SpooledDelta,
  keep: TokenOptions | null,
): Promise<IncrementalResult> {
  let output;
  try {
    output = await openOutput(o.out, { encoded: false, asServer: true });
  } catch (err) {
    if (err instanceof OutputError) return { kind: 'unwritable', reason: err.message };
    throw err;
  }
  const verifier = bodyVerifier(o.format);
  const verified = new Promise<void>((resolve, reject) => verifier.once('finish', resolve).once('error', reject));
  let bytes = 0;
  const body = mergedBody({
    format: o.format,
    book: delta.book,
    old,
    changed: spooledDocuments(spool),
    drop: (id) => delta.drop.has(id),
  });
  try {
    await pipeline(
      Readable.from(body),
      counter((n) => (bytes = n)),
      teeTo(verifier, verified),
      ...output.stages,
    );
  } catch (err) {
    await output.abort();
    if (err instanceof OutputError) return { kind: 'unwritable', reason: err.message };
    return { kind: 'fallback', why: `${o.out} could not be merged (${(err as Error).message}): a full export` };
  }
  const verdict = verifier.verdict();
  const why = incompleteReason(verdict);
  if (why !== null) {
    await output.abort();
    return { kind: 'fallback', why: `the merged file failed its check (${why}): a full export` };
  }
  try {
    await output.commit(null, keep === null ? null : { token: delta.token, options: keep });
  } catch (err) {
    await output.abort();
    return { kind: 'unwritable', reason: (err as Error).message };
  }
  return {
    kind: 'written',
    documents: verdict.documents,
    bytes,
    fileBytes: output.written(),
    fromServer: null,
    etag: null,
    delta: { changed: delta.changed, removed: delta.removed, bytes: delta.bytes },
    file: { sha256: output.sha256()!, changeToken: delta.token, mediaPrefix: delta.mediaPrefix },
  };
}
