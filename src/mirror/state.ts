/**
 * What a mirror keeps in `DIR/.kb-export/` about itself: `state.json` (the book, the format and
 * what else decides a page's bytes) and `index.ndjson`, one line per document with its path, the
 * SHA-256 of its exported JSON, the size and ctime of its file as written. A run writes the
 * paths it is about to use to `index.next.ndjson` before it writes pages and renames the new index
 * over the old once done, so a run killed in between leaves a list of every file it may have
 * written: the next run removes those it no longer needs. `media-off.ndjson` lists the media to
 * remove once `--media` was switched off. Files are replaced through `tmp/` and a rename.
 */
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import { syncDir } from '../backup/output.js';
import { DirSync } from './files.js';

/** One document of the last run: its path in the mirror, the SHA-256 (hex) of its JSON, its file's size (bytes). */
export interface IndexEntry {
  id: string;
  path: string;
  sha256: string;
  size: number;
  /** A digest of the page's links to other pages ('' or absent: none). */
  links?: string;
  /** The file's status change time (ctime, ns) once written or checked: any later write changes it, whatever the size and mtime. */
  ctime?: string;
}

/** `state.json`: the options a mirror was made with, and `render`, which changes when pages must be written anew. */
export interface MirrorState {
  book: string;
  format: 'markdown' | 'html';
  render: string;
}

/** The mirror's own folder and files. */
export class StateDir {
  readonly root: string;
  /** Folders of the tree this run changed, fsynced before the index moves. */
  readonly dirs = new DirSync();

  constructor(readonly dir: string) {
    this.root = path.join(dir, '.kb-export');
  }

  get exportFile(): string {
    return path.join(this.root, 'export.ndjson');
  }

  private get stateFile(): string {
    return path.join(this.root, 'state.json');
  }

  private get indexFile(): string {
    return path.join(this.root, 'index.ndjson');
  }

  /** The media files to remove since `--media` was switched off (removed once they are). */
  get mediaOffFile(): string {
    return path.join(this.root, 'media-off.ndjson');
  }

  /** Lists `paths` (of files under `media/`) in mediaOffFile, durably. */
  async noteMediaOff(paths: AsyncIterable<string>): Promise<void> {
    await this.replace(
      this.mediaOffFile,
      (async function* () {
        for await (const p of paths) yield `${JSON.stringify({ path: p })}\n`;
      })(),
    );
    await syncDir(this.root);
  }

  /** The paths mediaOffFile lists (none when it is missing). */
  async *mediaOff(): AsyncGenerator<string> {
    for await (const e of lines<{ path: string }>(this.mediaOffFile)) yield e.path;
  }

  private get nextFile(): string {
    return path.join(this.root, 'index.next.ndjson');
  }

  get tmpDir(): string {
    return path.join(this.root, 'tmp');
  }

  /** The state, or null for a new mirror. Throws when state.json is there but unreadable. */
  async readState(): Promise<MirrorState | null> {
    const text = await readFile(this.stateFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return null;
      throw err;
    });
    if (text === null) return null;
    const s = JSON.parse(text) as Partial<MirrorState>;
    if (typeof s.book !== 'string' || (s.format !== 'markdown' && s.format !== 'html') || typeof s.render !== 'string')
      throw new Error(`${this.stateFile} is not a mirror's state`);
    return s as MirrorState;
  }

  /** Creates `.kb-export/` and an empty `tmp/` (what a killed run left there is dropped). */
  async prepare(): Promise<void> {
    await rm(this.tmpDir, { recursive: true, force: true });
    await mkdir(this.tmpDir, { recursive: true });
  }

  /** The last run's entries, one at a time, in path order. */
  entries(): AsyncGenerator<IndexEntry> {
    return lines<IndexEntry>(this.indexFile);
  }

  /** Every path the last run, or a killed one after it, may have written (some more than once). */
  async *writtenPaths(): AsyncGenerator<string> {
    for await (const e of lines<IndexEntry>(this.indexFile)) yield e.path;
    for await (const e of lines<{ path: string }>(this.nextFile)) yield e.path;
  }

  /** Notes the paths this run will write, before it writes any. */
  async writeNext(paths: Iterable<string>): Promise<void> {
    await this.replace(
      this.nextFile,
      (function* () {
        for (const p of paths) yield `${JSON.stringify({ path: p })}\n`;
      })(),
    );
  }

  /** The run is done: the new index and state replace the old ones, and the list of the run's paths goes. */
  async commit(entries: AsyncIterable<IndexEntry>, state: MirrorState): Promise<void> {
    await this.dirs.flush();
    await this.replace(
      this.indexFile,
      (async function* () {
        for await (const e of entries)
          yield `${JSON.stringify({ id: e.id, path: e.path, sha256: e.sha256, size: e.size, links: e.links ?? '', ctime: e.ctime ?? '' })}\n`;
      })(),
    );
    await this.replace(this.stateFile, [`${JSON.stringify(state)}\n`]);
    await rm(this.nextFile, { force: true });
    await syncDir(this.root);
  }

  /** A temporary file name in `tmp/`, on the mirror's file system, for a rename into the tree. */
  tempName(): string {
    return path.join(this.tmpDir, randomBytes(8).toString('hex'));
  }

  private async replace(file: string, chunks: Iterable<string> | AsyncIterable<string>): Promise<void> {
    const tmp = this.tempName();
    const handle = await open(tmp, 'wx', 0o644);
    try {
      let buffered = '';
      for await (const c of chunks) {
        buffered += c;
        if (buffered.length > 1 << 20) {
          await handle.write(buffered);
          buffered = '';
        }
      }
      await handle.write(buffered);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
  }
}

async function* lines<T>(file: string): AsyncGenerator<T> {
  const input = createReadStream(file);
  const opened = await new Promise<boolean>((resolve) => {
    input.once('open', () => resolve(true)).once('error', () => resolve(false));
  });
  if (!opened) return;
  for await (const line of createInterface({ input, crlfDelay: Infinity }))
    if (line !== '') yield JSON.parse(line) as T;
}
