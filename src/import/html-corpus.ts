/** `kb-export import-html`'s walk: a folder of HTML pages as seed records (seed-format.md), nothing written. */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { SeedDocument } from '../load/seed-types.js';
import { pageFromHtml } from './html-page.js';

interface HtmlCorpusOptions {
  bookId: string;
}

/** Fixed, so byte-wise order is numeric order: a streaming walk learns its count only at the end. */
const ORDER_KEY_WIDTH = 8;
const ORDER_KEY_LIMIT = 36 ** ORDER_KEY_WIDTH;

const HTML_EXT = /\.html?$/i;

/**
 * Depth-first, symlinks skipped: a `category` per folder with a page below it (`_images/` is none), a
 * `document` per page, parents first; one page in memory at a time. Throws the fs error (it names the path).
 */
export async function* scanHtmlCorpus(dir: string, opts: HtmlCorpusOptions): AsyncGenerator<SeedDocument> {
  let seq = 0;
  const nextOrderKey = (): string => {
    if (seq >= ORDER_KEY_LIMIT) throw new Error(`html corpus: more than ${ORDER_KEY_LIMIT} entries`);
    return (seq++).toString(36).padStart(ORDER_KEY_WIDTH, '0');
  };
  // The folders on the current path, until a page below them turns up.
  const pending: { relPath: string; parentId: string | null; name: string; mtime: Date; emitted: boolean }[] = [];

  async function* walk(absDir: string, relDir: string): AsyncGenerator<SeedDocument> {
    const entries = await readdir(absDir, { withFileTypes: true });
    // Byte order of UTF-8 names, not UTF-16 code-unit order, so the walk matches `COLLATE "C"`.
    entries.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
    for (const entry of entries) {
      // withFileTypes reports what lstat sees, so a symlink is neither a file nor a directory here.
      if (entry.isSymbolicLink()) continue;
      const rel = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
      const abs = join(absDir, entry.name);
      if (entry.isDirectory()) {
        const parent = pending[pending.length - 1];
        pending.push({
          relPath: rel,
          parentId: parent ? docId(opts.bookId, parent.relPath) : null,
          name: entry.name,
          mtime: (await lstat(abs)).mtime,
          emitted: false,
        });
        yield* walk(abs, rel);
        pending.pop();
      } else if (entry.isFile() && HTML_EXT.test(entry.name)) {
        const read = readPage(abs);
        if (read === null) continue;
        const page = pageFromHtml(read.html, rel, entry.name.replace(HTML_EXT, ''));
        const mtime = read.mtime;
        for (const folder of pending) {
          if (folder.emitted) continue;
          folder.emitted = true;
          yield categoryRecord(opts.bookId, folder.relPath, folder.parentId, folder.name, folder.mtime, nextOrderKey());
        }
        const parent = pending[pending.length - 1];
        yield {
          ...nullExtras(),
          id: docId(opts.bookId, rel),
          slug: slugify(rel.replace(HTML_EXT, '')),
          name: page.name,
          type: 'document',
          parentId: parent ? docId(opts.bookId, parent.relPath) : null,
          orderKey: nextOrderKey(),
          status: 1,
          createdAt: mtime.toISOString(),
          updatedAt: mtime.toISOString(),
          contentStr: page.contentStr,
          contentHtml: page.contentHtml,
        };
      }
    }
  }

  yield* walk(dir, '');
}

/**
 * Through one descriptor, following no link; apart from the walk, so no frame of it keeps the page's
 * bytes. Synchronous: four trips through libuv's pool per page left the import waiting on them more
 * than on the database, and this command serves no one meanwhile.
 */
function readPage(file: string): { html: string; mtime: Date } | null {
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO put in its place would otherwise wait for a writer.
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') return null;
    throw err;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return null;
    const bytes = Buffer.allocUnsafe(st.size);
    let length = 0;
    while (length < bytes.length) {
      const n = readSync(fd, bytes, length, bytes.length - length, length);
      if (n === 0) break;
      length += n;
    }
    return { html: new TextDecoder('utf-8').decode(bytes.subarray(0, length)), mtime: st.mtime };
  } finally {
    closeSync(fd);
  }
}

function docId(bookId: string, relPath: string): string {
  return `${bookId}:${relPath}`;
}

function slugify(relPath: string): string {
  return relPath.replace(/[^A-Za-z0-9._-]/g, '-');
}

function nullExtras(): Pick<
  SeedDocument,
  'description' | 'emojiInfo' | 'cover' | 'tags' | 'themeId' | 'backgroundThemeId' | 'bodyFontSize'
> {
  return {
    description: null,
    emojiInfo: null,
    cover: null,
    tags: null,
    themeId: null,
    backgroundThemeId: null,
    bodyFontSize: null,
  };
}

function categoryRecord(
  bookId: string,
  relPath: string,
  parentId: string | null,
  name: string,
  mtime: Date,
  orderKey: string,
): SeedDocument {
  return {
    ...nullExtras(),
    id: docId(bookId, relPath),
    slug: slugify(relPath),
    name,
    type: 'category',
    parentId,
    orderKey,
    status: 1,
    createdAt: mtime.toISOString(),
    updatedAt: mtime.toISOString(),
    contentStr: null,
    contentHtml: null,
  };
}
