/**
 * A backup's manifest read back, by the next backup and by `kb-export verify`: its head and summary,
 * then its media entries one at a time (memory holds one). A manifest laid out as manifest.ts writes
 * it (the head on the first line, ending in `"media":[`, one media entry a line, each but the last
 * followed by a comma, the rest on a last line that starts with `]`) is read a line at a time, a
 * JSON.parse each: for thousands of entries several times faster than a JSON token stream. One laid
 * out otherwise (edited, or reformatted by another tool) is read as a JSON stream (stream-json).
 */
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { pipeline } from 'node:stream/promises';
import {
  MANIFEST_VERSION,
  ManifestError,
  manifestFileOf,
  type ManifestHead,
  type MediaEntry,
  type MediaSummary,
} from './manifest.js';

/**
 * stream-json, loaded only for a manifest that is not laid out as written: its 29 modules were a
 * sixth of verify's start-up.
 */
async function jsonStream() {
  const [{ parser }, { ignore }, { pick }, { streamArray }, { streamObject }] = await Promise.all([
    import('stream-json'),
    import('stream-json/filters/ignore.js'),
    import('stream-json/filters/pick.js'),
    import('stream-json/streamers/stream-array.js'),
    import('stream-json/streamers/stream-object.js'),
  ]);
  return { parser, ignore, pick, streamArray, streamObject };
}

/** The end of the first line of a manifest with a media list. */
const LIST_OPENS = '"media":[';
/** How far from either end a manifest's first or last line may reach, bytes: a head holds a change token of about 3 KB at most. */
const EDGE = 64 * 1024;

/**
 * The first and the last line of `file` when it is laid out as above (the last without its newline);
 * null otherwise, or when either is longer than 64 KiB. Rejects with the file system's error.
 */
async function manifestEdges(file: string): Promise<{ first: string; last: string } | null> {
  const handle = await open(file, 'r');
  try {
    const size = (await handle.stat()).size;
    const head = Buffer.alloc(Math.min(size, EDGE));
    await handle.read(head, 0, head.length, 0);
    const firstEnd = head.indexOf(0x0a);
    if (firstEnd < 0) return null;
    const first = head.subarray(0, firstEnd).toString();
    if (!first.endsWith(LIST_OPENS)) return null;
    const tailStart = Math.max(firstEnd + 1, size - EDGE);
    const tail = Buffer.alloc(size - tailStart);
    await handle.read(tail, 0, tail.length, tailStart);
    const body = tail.at(-1) === 0x0a ? tail.subarray(0, -1) : tail;
    const lastStart = body.lastIndexOf(0x0a);
    if (lastStart < 0 && tailStart !== firstEnd + 1) return null;
    const last = body.subarray(lastStart + 1).toString();
    return last.startsWith(']') ? { first, last } : null;
  } finally {
    await handle.close();
  }
}

/**
 * The entry lines of a manifest that manifestEdges() found laid out as above, without their commas,
 * in file order. Throws an Error naming the line when one breaks the layout (a missing or extra
 * comma, an empty line, text after the list's end).
 */
async function* entryLines(file: string): AsyncGenerator<string> {
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  let n = 0;
  let entries = 0;
  let comma = false;
  let ended = false;
  try {
    for await (const line of lines) {
      n++;
      if (n === 1) continue;
      if (ended) throw new Error(`line ${n} comes after the media list's end`);
      if (line.startsWith(']')) {
        if (comma) throw new Error(`line ${n - 1} ends with a comma before the list's end`);
        ended = true;
        continue;
      }
      if (entries > 0 && !comma) throw new Error(`line ${n - 1} has no comma before the next entry`);
      comma = line.endsWith(',');
      entries++;
      yield comma ? line.slice(0, -1) : line;
    }
  } finally {
    lines.close();
  }
  if (!ended) throw new Error("the media list's end is missing");
}

const isHex64 = (v: unknown): v is string => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** The head and summary of a manifest laid out as written; null when it is not, or they are no JSON. */
async function headOfLines(file: string): Promise<Record<string, unknown> | null> {
  const edges = await manifestEdges(file).catch(() => null);
  if (edges === null) return null;
  try {
    const v = JSON.parse(`${edges.first}${edges.last}`) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Every key of the manifest but its media list, read as a JSON stream. Throws ManifestError when it is no JSON. */
async function headAsJson(file: string): Promise<Record<string, unknown>> {
  const { parser, ignore, streamObject } = await jsonStream();
  const values = new Map<string, unknown>();
  const object = streamObject.asStream();
  const done = pipeline(createReadStream(file), parser.asStream(), ignore.asStream({ filter: 'media' }), object);
  done.catch(() => {});
  try {
    for await (const { key, value } of object as AsyncIterable<{ key: string; value: unknown }>) values.set(key, value);
    await done;
  } catch (err) {
    throw new ManifestError(`${file} is not JSON: ${(err as Error).message}`);
  }
  return Object.fromEntries(values) as Record<string, unknown>;
}

/** The manifest's head and summary, or null when there is no manifest. Throws ManifestError for one that is not a manifest of this version. */
export async function readManifestHead(
  out: string,
): Promise<{ head: ManifestHead; summary: MediaSummary | null } | null> {
  const file = manifestFileOf(out);
  if ((await stat(file).catch(() => null)) === null) return null;
  const v = (await headOfLines(file)) ?? (await headAsJson(file));
  const bad = (what: string) => new ManifestError(`${file}: ${what}`);
  if (v.kbExportManifest !== MANIFEST_VERSION) throw bad(`not a manifest of version ${MANIFEST_VERSION}`);
  const options = v.options as Record<string, unknown> | null;
  const exp = v.export as Record<string, unknown> | null;
  if (typeof v.book !== 'string') throw bad('no book');
  if (
    typeof options !== 'object' ||
    options === null ||
    (options.format !== 'json' && options.format !== 'ndjson') ||
    typeof options.includeCategories !== 'boolean' ||
    typeof options.html !== 'boolean'
  ) {
    throw bad('no options');
  }
  if (
    typeof exp !== 'object' ||
    exp === null ||
    typeof exp.file !== 'string' ||
    !isCount(exp.bytes) ||
    !isHex64(exp.sha256) ||
    !isCount(exp.documents)
  )
    throw bad('no export entry');
  const nullableString = (x: unknown) => x === null || typeof x === 'string';
  if (
    !nullableString(v.changeToken) ||
    !nullableString(v.etag) ||
    !nullableString(v.mediaPrefix) ||
    !nullableString(v.mediaDir)
  )
    throw bad('a bad changeToken, etag, mediaPrefix or mediaDir');
  const summary = v.summary as Record<string, unknown> | undefined;
  const head: ManifestHead = {
    book: v.book,
    options: { format: options.format, includeCategories: options.includeCategories, html: options.html },
    changeToken: v.changeToken as string | null,
    etag: v.etag as string | null,
    export: {
      file: exp.file,
      bytes: exp.bytes as number,
      sha256: exp.sha256 as string,
      documents: exp.documents as number,
    },
    mediaPrefix: v.mediaPrefix as string | null,
    mediaDir: v.mediaDir as string | null,
  };
  const totals =
    typeof summary === 'object' &&
    summary !== null &&
    isCount(summary.files) &&
    isCount(summary.bytes) &&
    isCount(summary.missing)
      ? { files: summary.files, bytes: summary.bytes, missing: summary.missing }
      : null;
  return { head, summary: totals };
}

/** An entry read back, or why it is not one. */
function entryOf(value: unknown): MediaEntry | string {
  if (typeof value !== 'object' || value === null) return 'not an object';
  const e = value as Record<string, unknown>;
  if (typeof e.url !== 'string') return 'no url';
  if (
    typeof e.path === 'string' &&
    isHex64(e.sha256) &&
    isCount(e.bytes) &&
    (e.contentType === null || typeof e.contentType === 'string')
  ) {
    return { path: e.path, url: e.url, bytes: e.bytes, sha256: e.sha256, contentType: e.contentType };
  }
  if (
    (e.path === null || typeof e.path === 'string') &&
    typeof e.missing === 'string' &&
    (e.status === null || isCount(e.status))
  ) {
    return { path: e.path, url: e.url, missing: e.missing, status: e.status };
  }
  return 'neither a file (path, bytes, sha256, contentType) nor a missing one (path, missing, status)';
}

/**
 * The manifest's media entries in file order, one at a time; an entry of another shape comes as
 * `{ bad: why, index }`. Throws ManifestError when the file is not JSON or its media is no list.
 */
export async function* manifestEntries(out: string): AsyncGenerator<MediaEntry | { bad: string; index: number }> {
  const file = manifestFileOf(out);
  if ((await manifestEdges(file).catch(() => null)) !== null) {
    yield* entriesOfLines(file);
    return;
  }
  const { parser, pick, streamArray } = await jsonStream();
  const array = streamArray.asStream();
  const done = pipeline(createReadStream(file), parser.asStream(), pick.asStream({ filter: 'media' }), array);
  done.catch((err: Error) => array.destroy(err));
  try {
    for await (const { key, value } of array as AsyncIterable<{ key: number; value: unknown }>) {
      const e = entryOf(value);
      yield typeof e === 'string' ? { bad: e, index: key } : e;
    }
    await done;
  } catch (err) {
    throw new ManifestError(`${file}: its media list cannot be read: ${(err as Error).message}`);
  }
}

/** manifestEntries() of a manifest laid out as written: a JSON.parse a line. Throws ManifestError. */
async function* entriesOfLines(file: string): AsyncGenerator<MediaEntry | { bad: string; index: number }> {
  let index = 0;
  try {
    for await (const line of entryLines(file)) {
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        throw new Error(`media entry ${index} is not JSON`);
      }
      const e = entryOf(value);
      yield typeof e === 'string' ? { bad: e, index } : e;
      index++;
    }
  } catch (err) {
    throw new ManifestError(`${file}: its media list cannot be read: ${(err as Error).message}`);
  }
}
