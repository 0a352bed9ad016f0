/**
 * Resuming a cut backup (D13.2): a connection cut after the first byte no longer costs the whole
 * export again. The whole documents received so far are kept in a spool beside `PATH` (one JSON text
 * a line, as the server wrote it, in export order); each further attempt asks for the documents after
 * the last one kept (`afterOrderKey`/`afterId`, D13.1) and appends them; once the rest arrived whole,
 * the delta since the first response's token makes the spooled parts, taken from several snapshots,
 * the export of one: merged as an incremental backup merges (incremental.ts), so the file equals, byte
 * for byte, a full backup of the delta's snapshot. Memory holds a document at a time.
 */
import { randomBytes } from 'node:crypto';
import { open, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { createReadStream } from 'node:fs';
import { request } from 'undici';
import { decoder, untilCut } from './body-streams.js';
import { acceptEncoding, header, refusal, type AttemptResult, type CutExport } from './download.js';
import { mergeDelta, spoolDelta, type IncrementalResult } from './incremental.js';
import { before, rawDocument, spooledDocuments, type RawDocument } from './merge.js';
import { fileEncodingOf, OutputError, writeAll } from './output.js';
import { RawExportSplitter, RawSplitError } from './raw-split.js';
import type { TokenOptions } from './record.js';
import type { BackupFormat } from './verify.js';

const NEWLINE = Buffer.from('\n');

/** The documents of a cut export kept so far, and where to go on from. */
export class ResumeSpool {
  /** Whole documents kept. */
  documents = 0;
  /** The last one: the next attempt asks for what comes after it. */
  last: RawDocument | null = null;
  /** The documents after the last cut arrived whole, meta.count included: only the delta is missing. */
  complete = false;

  private constructor(
    readonly file: string,
    /** The first response's change token: the delta since it makes the parts one snapshot (D13.2). */
    readonly token: string,
    private readonly format: BackupFormat,
  ) {}

  /**
   * A spool beside `out` holding the whole documents of `cut.partial` (the cut attempt's file, in
   * `out`'s encoding, read as far as it decodes), which is removed. Throws OutputError when the spool
   * cannot be written.
   */
  static async fromCut(out: string, format: BackupFormat, cut: CutExport): Promise<ResumeSpool> {
    const file = path.join(
      path.dirname(path.resolve(out)),
      `.${path.basename(out)}.${randomBytes(4).toString('hex')}.parts.tmp`,
    );
    const spool = new ResumeSpool(file, cut.token, format);
    const handle = await open(file, 'wx', 0o600).catch((err: Error) => {
      throw new OutputError(`cannot write beside ${out}: ${err.message}`);
    });
    try {
      await spool.#append(handle, partialBytes(cut.partial, fileEncodingOf(out)), false);
    } finally {
      await handle.close().catch(() => {});
      await rm(cut.partial, { force: true }).catch(() => {});
    }
    return spool;
  }

  /** Removes the spool. Never throws. */
  async remove(): Promise<void> {
    await rm(this.file, { force: true }).catch(() => {});
  }

  /**
   * Appends the whole documents of `body` (an export's decoded bytes) that sort after the last one
   * kept; with `whole`, the body must end with its meta.count, which must count what it held.
   * Returns the documents appended. Throws RawSplitError for a body out of order or cut short (when
   * `whole`), OutputError when the spool cannot be written; what was appended before stays.
   */
  async #append(handle: FileHandle, body: AsyncIterable<Buffer>, whole: boolean): Promise<number> {
    let added = 0;
    let lines: Buffer[] = [];
    const splitter = new RawExportSplitter(this.format, {
      book() {},
      document: (raw) => {
        const d = rawDocument(raw);
        if (this.last !== null && !before(this.last, d))
          throw new RawSplitError(`the documents are out of export order at ${d.id}`);
        this.last = d;
        lines.push(raw, NEWLINE);
        added++;
      },
      removed() {
        throw new RawSplitError('a resumed export holds no removals');
      },
    });
    const flush = async () => {
      const out = lines;
      const documents = out.length / 2;
      lines = [];
      if (documents > 0)
        await writeAll(handle, out).catch((err: Error) =>
          Promise.reject(new OutputError(`cannot write ${this.file}: ${err.message}`)),
        );
      this.documents += documents;
    };
    try {
      for await (const chunk of body) {
        splitter.write(chunk);
        await flush();
      }
      if (whole && splitter.end() !== added)
        throw new RawSplitError('meta.count does not count the documents that came');
    } finally {
      await flush();
      await handle.sync().catch(() => {});
    }
    return added;
  }

  /** Appends the documents of one resumed response's body (decoded); see #append. */
  async appendResponse(body: AsyncIterable<Buffer>): Promise<number> {
    const handle = await open(this.file, 'a').catch((err: Error) => {
      throw new OutputError(`cannot write ${this.file}: ${err.message}`);
    });
    try {
      return await this.#append(handle, body, true);
    } finally {
      await handle.close().catch(() => {});
    }
  }
}

/**
 * A partial file's bytes, decoded as far as they go: a cut compressed stream ends inside a block, so
 * the decompressor flushes what it has rather than failing, and any error at the cut ends the bytes.
 */
async function* partialBytes(file: string, encoding: ReturnType<typeof fileEncodingOf>): AsyncGenerator<Buffer> {
  const raw = createReadStream(file, { highWaterMark: 256 * 1024 });
  const source: AsyncIterable<Buffer> = encoding === null ? raw : raw.pipe(decoder(encoding, { endsEarly: true }));
  try {
    for await (const chunk of source) yield chunk;
  } catch {
    // The cut: whatever decoded before it is kept.
  }
}

interface ResumeOptions {
  /** The export's URL with its options. */
  url: string;
  key: string;
  format: BackupFormat;
  out: string;
  timeoutS: number;
  /** Keep the final delta's token for --incremental. */
  keepToken: TokenOptions | null;
  /** Ask for compression in transit for a plain PATH (--compressed); a compressed PATH always does. */
  compressed?: boolean;
  /** Decoded bytes received by this attempt so far. */
  onBytes?: (bytes: number) => void;
}

/** How a resumed attempt ended, and how many documents it added to the spool. */
export type ResumeResult = IncrementalResult & { added: number };

/**
 * One attempt at the rest of a cut export: the documents after the last one kept, then, once they all
 * came, the delta since the first token, merged with them into PATH. Connection and write errors come
 * back as `broken` and `unwritable`, never thrown; `fallback` when the delta cannot be had (a full
 * export is due).
 */
export async function attemptResume(o: ResumeOptions, spool: ResumeSpool): Promise<ResumeResult> {
  let added = 0;
  if (!spool.complete) {
    const rest = await fetchRest(o, spool);
    added = rest.added;
    if (rest.result !== null) return { ...rest.result, added };
    spool.complete = true;
  }
  const deltaFile = `${spool.file}.delta`;
  try {
    const delta = await spoolDelta(
      {
        url: o.url,
        key: o.key,
        format: o.format,
        out: o.out,
        token: spool.token,
        timeoutS: o.timeoutS,
        ...(o.onBytes ? { onBytes: o.onBytes } : {}),
      },
      deltaFile,
    );
    if (delta.kind !== 'spooled') return { ...delta, added };
    return { ...(await mergeDelta(o, spooledDocuments(spool.file), deltaFile, delta.delta, o.keepToken)), added };
  } finally {
    await rm(deltaFile, { force: true }).catch(() => {});
  }
}

/** The documents after the last one kept, appended to the spool; `result` null once they all came. */
async function fetchRest(
  o: ResumeOptions,
  spool: ResumeSpool,
): Promise<{ added: number; result: AttemptResult | null }> {
  const url = new URL(o.url);
  if (spool.last !== null) {
    const last = JSON.parse(spool.last.raw.toString()) as { id: string; orderKey: string };
    url.searchParams.set('afterOrderKey', last.orderKey);
    url.searchParams.set('afterId', last.id);
  }
  let res;
  try {
    res = await request(url, {
      headers: {
        authorization: `Bearer ${o.key}`,
        accept: o.format === 'ndjson' ? 'application/x-ndjson' : 'application/json',
        'accept-encoding': acceptEncoding(null, (o.compressed ?? false) || fileEncodingOf(o.out) !== null),
      },
      headersTimeout: o.timeoutS * 1000,
      bodyTimeout: o.timeoutS * 1000,
    });
  } catch (err) {
    return { added: 0, result: { kind: 'broken', reason: (err as Error).message } };
  }
  if (res.statusCode !== 200) return { added: 0, result: await refusal(res) };
  const before = spool.documents;
  // A cut ends the body, so the decoder passes on what it holds, and ends there too: the spool
  // takes whole documents only, and the rest must end with its meta.count.
  const encoding = (header(res.headers['content-encoding']) ?? 'identity').trim().toLowerCase();
  const decode = decoder(encoding, { endsEarly: true });
  const body = untilCut(res.body);
  decode.on('error', () => {});
  body.source.on('error', (err) => decode.destroy(err));
  body.source.pipe(decode);
  let failure: Error | null = null;
  try {
    await spool.appendResponse(counted(decode, o.onBytes));
  } catch (err) {
    res.body.destroy();
    failure = err as Error;
  }
  const added = spool.documents - before;
  if (failure instanceof OutputError) return { added, result: { kind: 'unwritable', reason: failure.message } };
  failure = body.cut() ?? failure;
  return { added, result: failure === null ? null : { kind: 'broken', reason: failure.message } };
}

/** `source`'s chunks, their running total of bytes told to `onBytes`. */
async function* counted(source: AsyncIterable<Buffer>, onBytes?: (bytes: number) => void): AsyncGenerator<Buffer> {
  let bytes = 0;
  for await (const chunk of source) {
    bytes += chunk.length;
    onBytes?.(bytes);
    yield chunk;
  }
}
