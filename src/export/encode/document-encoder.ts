/**
 * Encodes the export's response as JSON, one piece at a time: the opening with `book`, each
 * document, and the closing with `meta.count` last (decisions.md D2.5). Applies the empty/default
 * rules of decisions.md D2 and the media rewriting of D3.
 *
 * Document columns arrive as JSON text already escaped by PostgreSQL (query.ts), so most of a
 * document is copied as bytes; only `cover.url` is decoded, rewritten and escaped here, and
 * contentHtml's rewrite plan is computed here (contentHtmlPlan) for the HTML stage.
 */
import { FRAMING, type BodyFormat } from './body-format.js';
import { HtmlMediaRewriter, mediaPreCheck, type Edit } from '../rewrite/html-rewriter.js';
import { noteRewritten } from '../rewrite/large-garbage.js';
import type { JsonChunker } from './json-encoder.js';
import { rewriteMediaUrl } from '../rewrite/media-url.js';
import { EMPTY_PLAN, jsonPrefixBytes, planFromEdits } from '../rewrite/rewrite-plan.js';
import { DOC, type BookRow, type DocumentRow } from '../snapshot/query.js';

/** NULL or '' is null (decisions.md D2.1). */
function nullable(s: string | null): string {
  return s === null || s === '' ? 'null' : JSON.stringify(s);
}

/**
 * The body up to its first document: `{"success":true,"book":{…},"documents":[` for JSON, the
 * first line for NDJSON (body-format.ts); book fields in the order of table 2.1 (decisions.md D2.5).
 */
export function encodeOpening(book: BookRow, format: BodyFormat = 'json'): string {
  const framing = FRAMING[format];
  return framing.head + encodeBook(book) + framing.afterBook;
}

function encodeBook(book: BookRow): string {
  return (
    '{"id":' +
    JSON.stringify(book.id) +
    ',"slug":' +
    JSON.stringify(book.slug) +
    ',"name":' +
    JSON.stringify(book.name) +
    ',"description":' +
    nullable(book.description) +
    // decisions.md D3.6: book.coverImage is returned as stored.
    ',"coverImage":' +
    nullable(book.cover_image) +
    ',"createdAt":' +
    JSON.stringify(book.created_at) +
    ',"updatedAt":' +
    JSON.stringify(book.updated_at) +
    '}'
  );
}

/** `],"meta":{"count":N}}` (or NDJSON's last line): written only after the snapshot was read in full (decisions.md D6.3). */
export function encodeClosing(count: number, format: BodyFormat = 'json'): string {
  return FRAMING[format].closing(count);
}

const bytes = (s: string) => Buffer.from(s);
const NULL = bytes('null');
const KEY = {
  id: bytes('{"id":'),
  slug: bytes(',"slug":'),
  name: bytes(',"name":'),
  type: bytes(',"type":'),
  parentId: bytes(',"parentId":'),
  orderKey: bytes(',"orderKey":'),
  description: bytes(',"description":'),
  emojiInfo: bytes(',"emojiInfo":'),
  cover: bytes(',"cover":'),
  tags: bytes(',"tags":'),
  themeId: bytes(',"themeId":'),
  backgroundThemeId: bytes(',"backgroundThemeId":'),
  bodyFontSize: bytes(',"bodyFontSize":'),
  createdAt: bytes(',"createdAt":'),
  updatedAt: bytes(',"updatedAt":'),
  contentStr: bytes(',"contentStr":'),
  contentHtml: bytes(',"contentHtml":'),
  end: bytes('}'),
};
const DEFAULT = {
  coverPosition: bytes('"center"'),
  themeId: bytes('"default"'),
  backgroundThemeId: bytes('"transparent"'),
  bodyFontSize: bytes('"default"'),
};

/** Whether JSON text `j` is `""` or, for arrays, `[]`. */
function isEmptyJson(j: Buffer): boolean {
  return j.length === 2 && ((j[0] === 0x22 && j[1] === 0x22) || (j[0] === 0x5b && j[1] === 0x5d));
}

/** NULL, '' or an empty array is null (decisions.md D2.1). */
function orNull(j: Buffer | null): Buffer {
  return j === null || isEmptyJson(j) ? NULL : j;
}

/** NULL or '' gives the default (decisions.md D2.2, D2.3). */
function orDefault(j: Buffer | null, def: Buffer): Buffer {
  return j === null || isEmptyJson(j) ? def : j;
}

/**
 * The decisions.md D3.3 pre-check on `contentHtml` as escaped JSON text, with no false negatives:
 * a media tag name after `<`, followed by what ends a tag name in HTML (white space, `/`, `>`) or
 * by what such a character or the end of the text becomes in JSON (`\`, `"`). An `a` counts only
 * when `download` or `data-type` occurs (attribute names cannot be written with character
 * references). JSON escaping never touches `<` or ASCII letters, and a UTF-8 continuation byte
 * read as Latin-1 never matches an ASCII letter, so every real media tag is seen.
 */
const jsonPreCheck = mediaPreCheck('\\t\\n\\f\\r />"\\\\');

/** Whether escaped JSON text of some HTML may hold a URL that D3.3 rewrites. */
function jsonHtmlMayNeedRewrite(json: Buffer): boolean {
  return jsonPreCheck(json.toString('latin1'));
}

/**
 * contentHtml's JSON text as exported when it needs no rewriting: `null` for NULL or `""`
 * (decisions.md D2.1), `j` itself when jsonHtmlMayNeedRewrite lets it through; undefined when it
 * must go through the tokenizer (contentHtmlPlan).
 */
export function contentHtmlAsStored(j: Buffer | null): Buffer | undefined {
  if (j === null || isEmptyJson(j)) return NULL;
  return jsonHtmlMayNeedRewrite(j) ? undefined : j;
}

/**
 * The rewrite plan (rewrite-plan.ts) of a flagged contentHtml (`j`: contentHtmlAsStored gave undefined)
 * under media proxy prefix `prefix` (export-api.md 2.2 rule 1, decisions.md D3): the edits parse5's
 * tokenizer finds (HtmlMediaRewriter), at the byte offsets of the JSON text (jsonOffsets), each new
 * value escaped for JSON. The HTML is decoded only for the tokenizer; applying the plan copies the
 * rest of the text as PostgreSQL escaped it, never decoded, re-escaped or re-encoded. EMPTY_PLAN
 * when nothing is rewritten.
 */
export function contentHtmlPlan(j: Buffer, prefix: string): Buffer {
  noteRewritten(j.length);
  const html = JSON.parse(j.toString('utf8')) as string;
  // The pre-check already ran on the escaped text: straight to the tokenizer.
  const edits = new HtmlMediaRewriter(prefix).editsOf(html);
  if (edits.length === 0) return EMPTY_PLAN;
  const texts = edits.map((e) => Buffer.from(JSON.stringify(e.text).slice(1, -1)));
  return planFromEdits(j, jsonOffsets(j, edits), texts, jsonPrefixBytes(prefix));
}

/**
 * Byte offsets in the JSON string text `j` (a quoted, escaped UTF-8 string) of each edit's start
 * and end, given in UTF-16 offsets of the decoded string: [start0, end0, start1, end1, …]. One
 * pass: an escape (`\x`, or `\u` and four hex digits) is one UTF-16 unit, a UTF-8 sequence of four bytes two,
 * any other one. Edits are in order and never split a surrogate pair (they begin and end at ASCII
 * quotes or attribute syntax).
 */
function jsonOffsets(j: Buffer, edits: readonly Edit[]): number[] {
  const out: number[] = [];
  let byte = 1; // after the opening quote
  let unit = 0;
  for (const e of edits) {
    for (const target of [e.start, e.end]) {
      while (unit < target) {
        const b = j[byte]!;
        if (b === 0x5c /* \ */) byte += j[byte + 1] === 0x75 /* u */ ? 6 : 2;
        else if (b < 0x80) byte += 1;
        else if (b < 0xe0) byte += 2;
        else if (b < 0xf0) byte += 3;
        else {
          byte += 4;
          unit++;
        }
        unit++;
      }
      out.push(byte);
    }
  }
  return out;
}

/**
 * contentHtml's JSON text as exported: one Buffer, or the parts a rewrite plan splices together
 * (rewrite-plan.ts planParts), written in order without being joined first.
 */
export type ContentHtmlJson = Buffer | readonly Buffer[];

/**
 * Appends one document object to `out`: every field of table 2.2 in its order (export-api.md 2.2
 * rule 3, D2.5), cover.url through the media rewriter (export-api.md 2.2 rule 1, decisions.md D3).
 * `html` is contentHtml's JSON text as exported, worked out by the HTML stage
 * (rewrite/html-stage.ts rewriteBatchHtml), and is written as it is.
 */
export function encodeDocument(row: DocumentRow, mediaPrefix: string, out: JsonChunker, html: ContentHtmlJson): void {
  const coverUrl = row[DOC.coverUrl];
  out.push(KEY.id);
  out.push(row[DOC.id]);
  out.push(KEY.slug);
  out.push(row[DOC.slug]);
  out.push(KEY.name);
  out.push(row[DOC.name]);
  out.push(KEY.type);
  out.push(row[DOC.type]);
  out.push(KEY.parentId);
  out.push(orNull(row[DOC.parentId]));
  out.push(KEY.orderKey);
  out.push(row[DOC.orderKey]);
  out.push(KEY.description);
  out.push(orNull(row[DOC.description]));
  out.push(KEY.emojiInfo);
  out.push(orNull(row[DOC.emojiInfo]));
  out.push(KEY.cover);
  if (coverUrl === null || coverUrl.length === 0) {
    out.push(NULL);
  } else {
    out.push('{"url":' + JSON.stringify(rewriteMediaUrl(coverUrl.toString('utf8'), mediaPrefix)) + ',"position":');
    out.push(orDefault(row[DOC.coverPosition], DEFAULT.coverPosition));
    out.push(KEY.end);
  }
  out.push(KEY.tags);
  out.push(orNull(row[DOC.tags]));
  out.push(KEY.themeId);
  out.push(orDefault(row[DOC.themeId], DEFAULT.themeId));
  out.push(KEY.backgroundThemeId);
  out.push(orDefault(row[DOC.backgroundThemeId], DEFAULT.backgroundThemeId));
  out.push(KEY.bodyFontSize);
  out.push(orDefault(row[DOC.bodyFontSize], DEFAULT.bodyFontSize));
  out.push(KEY.createdAt);
  out.push(row[DOC.createdAt]);
  out.push(KEY.updatedAt);
  out.push(row[DOC.updatedAt]);
  out.push(KEY.contentStr);
  out.push(orNull(row[DOC.contentStr]));
  out.push(KEY.contentHtml);
  if (Array.isArray(html)) for (const part of html) out.push(part);
  else out.push(html as Buffer);
  out.push(KEY.end);
}
