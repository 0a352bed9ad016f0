/**
 * Encodes the export's response as JSON text, one piece at a time: the opening with `book`, each
 * document, and the closing with `meta.count` last (decisions.md D2.5). Applies the empty/default
 * rules of decisions.md D2 and the media rewriting of D3.
 */
import { rewriteHtml } from './html-rewriter.js';
import { jsonString, jsonStringArray } from './json-encoder.js';
import { rewriteMediaUrl } from './media-url.js';
import { DOC, type BookRow, type DocumentRow } from './query.js';

/** NULL or '' is null (decisions.md D2.1). */
function nullable(s: string | null): string {
  return s === null || s === '' ? 'null' : JSON.stringify(s);
}

/** NULL or '' gives the default (decisions.md D2.2, D2.3). */
function withDefault(s: string | null, def: string): string {
  return JSON.stringify(s === null || s === '' ? def : s);
}

/** `{"success":true,"book":{…},"documents":[` — book fields in the order of table 2.1 (decisions.md D2.5). */
export function encodeOpening(book: BookRow): string {
  return (
    '{"success":true,"book":{"id":' +
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
    '},"documents":['
  );
}

/** `],"meta":{"count":N}}` — written only after the snapshot was read in full (decisions.md D6.3). */
export function encodeClosing(count: number): string {
  return '],"meta":{"count":' + count + '}}';
}

/**
 * One document object, every field of table 2.2 in its order (export-api.md 2.2 rule 3, D2.5).
 * contentHtml goes through the media rewriter (export-api.md 2.2 rule 1, decisions.md D3).
 */
export function encodeDocument(row: DocumentRow, mediaPrefix: string): string {
  const coverUrl = row[DOC.coverUrl];
  const tags = row[DOC.tags];
  const html = row[DOC.contentHtml];
  const cover =
    coverUrl === null || coverUrl === ''
      ? 'null'
      : '{"url":' +
        JSON.stringify(rewriteMediaUrl(coverUrl, mediaPrefix)) +
        ',"position":' +
        withDefault(row[DOC.coverPosition], 'center') +
        '}';
  return (
    '{"id":' +
    JSON.stringify(row[DOC.id]) +
    ',"slug":' +
    JSON.stringify(row[DOC.slug]) +
    ',"name":' +
    JSON.stringify(row[DOC.name]) +
    ',"type":' +
    JSON.stringify(row[DOC.type]) +
    ',"parentId":' +
    nullable(row[DOC.parentId]) +
    ',"orderKey":' +
    JSON.stringify(row[DOC.orderKey]) +
    ',"description":' +
    nullable(row[DOC.description]) +
    ',"emojiInfo":' +
    nullable(row[DOC.emojiInfo]) +
    ',"cover":' +
    cover +
    ',"tags":' +
    (tags === null || tags.length === 0 ? 'null' : jsonStringArray(tags)) +
    ',"themeId":' +
    withDefault(row[DOC.themeId], 'default') +
    ',"backgroundThemeId":' +
    withDefault(row[DOC.backgroundThemeId], 'transparent') +
    ',"bodyFontSize":' +
    withDefault(row[DOC.bodyFontSize], 'default') +
    ',"createdAt":' +
    JSON.stringify(row[DOC.createdAt]) +
    ',"updatedAt":' +
    JSON.stringify(row[DOC.updatedAt]) +
    ',"contentStr":' +
    nullable(row[DOC.contentStr]) +
    ',"contentHtml":' +
    (html === null || html === '' ? 'null' : jsonString(rewriteHtml(html, mediaPrefix))) +
    '}'
  );
}
