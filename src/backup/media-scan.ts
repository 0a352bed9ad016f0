/**
 * The media URLs of an export: each document's `cover.url` and the values of D3.3's attributes in
 * its `contentHtml` (srcset candidates one by one), kept when they start with the response's media
 * prefix, which is exactly what the server rewrote. The body is read as the bytes of a file (a
 * backup read back), cut into documents by raw-split.ts, so memory holds one document at a time;
 * each `contentHtml` goes through the same tokenizer and the same table (media-attributes.ts) as
 * the server's rewriter, skipped when the table's pre-check finds no media tag in it (D3.2, D3.3,
 * D3.6, D13.3).
 */
import { Writable } from 'node:stream';
import { SyncSaxParser } from '../export/rewrite/rewriter/html-tokenizer.js';
import { mayNeedRewrite, rewrittenAttrsOf, srcsetUrls } from '../export/rewrite/rewriter/media-attributes.js';
import { trimAscii, type MediaUrls } from './media-path.js';
import { RawExportSplitter } from './raw-split.js';
import type { BackupFormat } from './verify.js';

/** Pushes onto `out` the media URLs of one document, parsed (an export's document object), in document order, duplicates included. */
export function documentMediaUrls(doc: unknown, media: MediaUrls, out: string[]): void {
  if (typeof doc !== 'object' || doc === null) return;
  const consider = (value: string) => {
    const trimmed = trimAscii(value);
    if (media.matches(trimmed)) out.push(trimmed);
  };
  const { cover, contentHtml } = doc as { cover?: unknown; contentHtml?: unknown };
  const coverUrl = typeof cover === 'object' && cover !== null ? (cover as { url?: unknown }).url : undefined;
  if (typeof coverUrl === 'string') consider(coverUrl);
  if (typeof contentHtml !== 'string' || !mayNeedRewrite(contentHtml)) return;
  const sax = new SyncSaxParser((tag, foreign) => {
    const rules = rewrittenAttrsOf(tag.tagName, tag.attrs, foreign);
    if (rules === undefined) return;
    for (const attr of tag.attrs) {
      const kind = rules.get(attr.name);
      if (kind === 'url') consider(attr.value);
      else if (kind === 'srcset') for (const url of srcsetUrls(attr.value)) consider(url);
    }
  });
  sax.tokenize(contentHtml, true);
}

/**
 * A Writable taking an export body's bytes (decompressed), JSON or NDJSON, that hands each media
 * URL to `onUrl`, waiting for it (it may write to disk). It fails on a body raw-split.ts cannot
 * frame or a document that is not JSON; it does not check `meta.count` (verify.ts does).
 */
export function mediaScanner(
  format: BackupFormat,
  media: MediaUrls,
  onUrl: (url: string) => Promise<void> | void,
): Writable {
  let found: string[] = [];
  const splitter = new RawExportSplitter(format, {
    book: () => {},
    document: (raw) => documentMediaUrls(JSON.parse(raw.toString('utf8')), media, found),
    removed: () => {},
  });
  const hand = async () => {
    const urls = found;
    found = [];
    for (const url of urls) await onUrl(url);
  };
  return new Writable({
    highWaterMark: 256 * 1024,
    write(chunk: Buffer, _enc, cb) {
      try {
        splitter.write(chunk);
      } catch (err) {
        cb(err as Error);
        return;
      }
      hand().then(() => cb(), cb);
    },
    final(cb) {
      try {
        splitter.end();
      } catch (err) {
        cb(err as Error);
        return;
      }
      hand().then(() => cb(), cb);
    },
  });
}
