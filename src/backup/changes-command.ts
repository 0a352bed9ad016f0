/**
 * `kb-export changes` (D12): NDJSON upsert/remove records on standard output for the
 * changes since the state file's token (every document on the first run). The state moves on only
 * once `meta.count` proved the body whole and standard output took every byte, so a failed or
 * killed run replays (at least once, never skipped). Documents are the server's bytes, one at a
 * time (raw-split.ts). Exit codes (README "Change feed"): 0, 1 failed, 2 usage, 3 refused,
 * 4 the token expired (410).
 */
import { readFile, rename } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { apiKey, exportUrl } from './backup-command.js';
import { BackupError } from './backup-error.js';
import { decoder } from './body-streams.js';
import { acceptEncoding, header, refusal } from './download.js';
import { syncDir, writeDurably } from './output.js';
import { RawExportSplitter } from './raw-split.js';

interface ChangesOptions {
  server: string;
  book: string;
  state: string;
  includeCategories: boolean;
  html: boolean;
  retries: number;
  timeoutS: number;
  quiet: boolean;
  keyFile?: string;
}

/** The state file: the token of the last run that completed, and the options it was issued for. */
interface ChangeState {
  token: string;
  book: string;
  includeCategories: boolean;
  html: boolean;
}

/** The state's token, or null without a state file. Throws BackupError (2) for a state of other options or another shape. */
async function readState(o: ChangesOptions): Promise<string | null> {
  const text = await readFile(o.state, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    throw new BackupError(`cannot read the state file ${o.state}: ${err.message}`, 1);
  });
  if (text === null) return null;
  let s: Partial<ChangeState> | null = null;
  try {
    s = JSON.parse(text) as Partial<ChangeState>;
  } catch {
    s = null;
  }
  if (typeof s?.token !== 'string' || s.token === '')
    throw new BackupError(`${o.state} is not a state file of kb-export changes`, 2);
  if (s.book !== o.book || s.includeCategories !== o.includeCategories || s.html !== o.html) {
    throw new BackupError(
      `${o.state} was kept for other options (${JSON.stringify({ book: s.book, includeCategories: s.includeCategories, html: s.html })}): use another --state, or the same options`,
      2,
    );
  }
  return s.token;
}

async function writeState(o: ChangesOptions, token: string): Promise<void> {
  const tmp = `${o.state}.${randomBytes(4).toString('hex')}.tmp`;
  const state: ChangeState = { token, book: o.book, includeCategories: o.includeCategories, html: o.html };
  await writeDurably(tmp, `${JSON.stringify(state)}\n`);
  await rename(tmp, o.state);
  await syncDir(path.dirname(path.resolve(o.state)));
}

const UPSERT = Buffer.from('{"op":"upsert","document":');
const REMOVE = Buffer.from('{"op":"remove","id":');
const END = Buffer.from('}\n');

/** Writes to standard output with its backpressure; its errors (EPIPE) fail the run. */
function stdoutSink(onChunk: (chunk: Buffer) => Buffer[], onEnd: () => void): Writable {
  const send = (pieces: Buffer[], cb: (err?: Error) => void) => {
    if (pieces.length === 0) return cb();
    // The callback comes once the bytes were handed to the operating system (or failed).
    process.stdout.write(Buffer.concat(pieces), (err) => cb(err ?? undefined));
  };
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      let pieces: Buffer[];
      try {
        pieces = onChunk(chunk);
      } catch (err) {
        return cb(err as Error);
      }
      send(pieces, cb);
    },
    final(cb) {
      try {
        onEnd();
      } catch (err) {
        return cb(err as Error);
      }
      cb();
    },
  });
}

/** Runs the feed; resolves with the final line for standard error. Throws BackupError. */
export async function runChanges(
  o: ChangesOptions,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const key = await apiKey(o, env);
  const url = new URL(
    exportUrl({ server: o.server, book: o.book, includeCategories: o.includeCategories, html: o.html }),
  );
  const since = await readState(o);
  if (since !== null) url.searchParams.set('changedSince', since);
  else if (!o.quiet) log(`no ${o.state} yet: every document as an upsert`);
  for (let attempt = 0; ; attempt++) {
    let res;
    try {
      res = await request(url, {
        headers: {
          authorization: `Bearer ${key}`,
          accept: 'application/x-ndjson',
          'accept-encoding': acceptEncoding(null),
        },
        headersTimeout: o.timeoutS * 1000,
        bodyTimeout: o.timeoutS * 1000,
      });
    } catch (err) {
      throw new BackupError(`cannot reach the server: ${(err as Error).message}; ${o.state} was left as it was`, 1);
    }
    if (res.statusCode === 200) return feed(o, res, since === null);
    const r = await refusal(res);
    const why = `${r.status} ${r.code}${r.message ? `: ${r.message}` : ''}`;
    if (r.status === 410) {
      throw new BackupError(
        `the server can no longer answer the token in ${o.state} (${why}). The changes since it cannot be listed: remove ${o.state} to start again with every document as an upsert, and rebuild what you keep from that run (removals in between are not reported)`,
        4,
      );
    }
    if ([400, 401, 404].includes(r.status)) throw new BackupError(`the server refused the changes: ${why}`, 3);
    if ((r.status !== 429 && r.status !== 503) || attempt >= o.retries)
      throw new BackupError(`changes failed: ${why}; ${o.state} was left as it was`, 1);
    const waitS = Math.min(r.retryAfterS ?? 2 ** attempt, 60);
    if (!o.quiet) log(`${why}; retrying in ${waitS} s`);
    await sleep(waitS * 1000);
  }
}

async function feed(o: ChangesOptions, res: Awaited<ReturnType<typeof request>>, first: boolean): Promise<string> {
  const token = header(res.headers['export-change-token']);
  if (!token) {
    await res.body.dump();
    throw new BackupError('the server sent no Export-Change-Token: it does not track changes', 1);
  }
  let upserts = 0;
  let removals = 0;
  let out: Buffer[] = [];
  const splitter = new RawExportSplitter('ndjson', {
    book() {},
    document(raw) {
      out.push(UPSERT, raw, END);
      upserts++;
    },
    removed(id) {
      out.push(REMOVE, Buffer.from(JSON.stringify(id)), END);
      removals++;
    },
  });
  const sink = stdoutSink(
    (chunk) => {
      splitter.write(chunk);
      const pieces = out;
      out = [];
      return pieces;
    },
    () => {
      const count = splitter.end();
      if (count !== upserts) throw new Error(`meta.count is ${count} but ${upserts} documents arrived`);
    },
  );
  // A closed pipe (EPIPE) reaches the write's callback; without a listener it would also crash the process.
  const ignore = () => {};
  process.stdout.on('error', ignore);
  try {
    await pipeline(
      res.body,
      decoder((header(res.headers['content-encoding']) ?? 'identity').trim().toLowerCase()),
      sink,
    );
  } catch (err) {
    res.body.destroy();
    throw new BackupError(
      `the changes were cut short after ${upserts + removals} records (${(err as Error).message}); ${o.state} was left as it was: the next run sends them again`,
      1,
    );
  } finally {
    process.stdout.off('error', ignore);
  }
  try {
    await writeState(o, token);
  } catch (err) {
    throw new BackupError(
      `every change was written, but ${o.state} could not be (${(err as Error).message}): the next run sends them again`,
      1,
    );
  }
  return `changes: ${upserts} upserts and ${removals} removals${first ? ' (a full read)' : ''}; ${o.state} moved on`;
}
