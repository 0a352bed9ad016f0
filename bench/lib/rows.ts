import type { ContentHtmlJson } from '../../src/export/rewrite/rewrites.js';
import { DOC, type DocumentRow } from '../../src/export/snapshot/rows.js';
import { planContentHtml } from '../../src/export/rewrite/plans/html-plan.js';
import { planSplice } from '../../src/export/rewrite/plans/plan-splice.js';
import { jsonPrefixBytes } from '../../src/export/rewrite/plans/rewrite-plan.js';
import { jsonHtmlMayNeedRewrite } from '../../src/export/rewrite/rewriter/html-rewriter.js';
import { rewriteMediaUrl } from '../../src/export/rewrite/rewriter/media-url.js';
/**
 * Document rows built without a database, for the encoder's benchmark and tests: the cursor's row
 * (src/export/snapshot/query.ts DocumentRow) for a document's stored values.
 */

/** A document's stored values in FIELD order, timestamps as ISO 8601 strings. */
export type DocumentValues = [
  id: string,
  slug: string,
  name: string,
  type: string,
  parentId: string | null,
  orderKey: string,
  description: string | null,
  emojiInfo: string | null,
  coverUrl: string | null,
  coverPosition: string | null,
  tags: string[] | null,
  themeId: string | null,
  backgroundThemeId: string | null,
  bodyFontSize: string | null,
  createdAt: string,
  updatedAt: string,
  contentStr: string | null,
  contentHtml: string | null,
];

/** Positions in DocumentValues: export-api.md table 2.2's fields. */
export const FIELD = {
  id: 0,
  slug: 1,
  name: 2,
  type: 3,
  parentId: 4,
  orderKey: 5,
  description: 6,
  emojiInfo: 7,
  coverUrl: 8,
  coverPosition: 9,
  tags: 10,
  themeId: 11,
  backgroundThemeId: 12,
  bodyFontSize: 13,
  createdAt: 14,
  updatedAt: 15,
  contentStr: 16,
  contentHtml: 17,
} as const;

/**
 * The row the cursor returns for these stored values (snapshot/query.ts, encode/rows.ts DOC), with
 * JSON.stringify standing in for PostgreSQL's `to_json` (both escape `"`, `\` and control
 * characters and leave other characters as they are). For tests and benchmarks that encode rows
 * without a database; a test holds the query to it. No plan is stored for such a row (DOC.plan NULL).
 */
export function rowFromValues(v: DocumentValues): DocumentRow {
  const j = (x: unknown) => JSON.stringify(x);
  const nullable = (x: string | null) => (x === null || x === '' ? 'null' : j(x));
  const withDefault = (x: string | null, def: string) => j(x === null || x === '' ? def : x);
  const tags = v[FIELD.tags];
  const head =
    `{"id":${j(v[FIELD.id])},"slug":${j(v[FIELD.slug])},"name":${j(v[FIELD.name])},"type":${j(v[FIELD.type])}` +
    `,"parentId":${nullable(v[FIELD.parentId])},"orderKey":${j(v[FIELD.orderKey])},"description":${nullable(v[FIELD.description])}` +
    `,"emojiInfo":${nullable(v[FIELD.emojiInfo])},"cover":`;
  const tail =
    `,"tags":${tags === null || tags.length === 0 ? 'null' : j(tags)},"themeId":${withDefault(v[FIELD.themeId], 'default')}` +
    `,"backgroundThemeId":${withDefault(v[FIELD.backgroundThemeId], 'transparent')},"bodyFontSize":${withDefault(v[FIELD.bodyFontSize], 'default')}` +
    `,"createdAt":${j(v[FIELD.createdAt])},"updatedAt":${j(v[FIELD.updatedAt])},"contentStr":${nullable(v[FIELD.contentStr])},"contentHtml":`;
  const cover = v[FIELD.coverUrl];
  const html = v[FIELD.contentHtml];
  const contentHtml = html === null || html === '' ? null : Buffer.from(j(html));
  if (cover === null || cover === '') return [Buffer.from(`${head}null${tail}`), null, null, null, contentHtml, null];
  const position = Buffer.from(withDefault(v[FIELD.coverPosition], 'center'));
  return [Buffer.from(head), Buffer.from(cover), position, Buffer.from(tail), contentHtml, null];
}

/**
 * Row `row`'s cover URL and contentHtml as the export's rewrite stage gives them under `prefix`
 * when it plans on the event loop without stored plans, synchronously (the stage pauses between
 * slices; this is the same work without the pauses). test/export/rewrite/rewrite-stage.test.ts
 * holds the stage to it.
 */
export function stagedRow(row: DocumentRow, prefix: string): { coverUrl: Buffer | null; html: ContentHtmlJson } {
  const cover = row[DOC.coverUrl];
  const coverUrl =
    cover === null || cover.length === 0
      ? null
      : Buffer.from(JSON.stringify(rewriteMediaUrl(cover.toString('utf8'), prefix)));
  const text = row[DOC.contentHtml];
  if (text === null || !jsonHtmlMayNeedRewrite(text)) return { coverUrl, html: text };
  return { coverUrl, html: planSplice(text, planContentHtml(text, prefix), jsonPrefixBytes(prefix)) };
}
