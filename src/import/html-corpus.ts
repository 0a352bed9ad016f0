/**
 * Scanner behind `kb-export import-html`: turns a folder of HTML pages into seed document records
 * (seed-format.md). Pure apart from reading the folder; the command and the database writer live
 * elsewhere.
 */
import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'parse5';
import type { DefaultTreeAdapterTypes as T } from 'parse5';
import type { SeedDocument } from '../load/seed-types.js';
import { rewriteCorpusUrls } from './corpus-urls.js';

interface HtmlCorpusOptions {
  /** Id of the book the documents go into; prefixes every document id. */
  bookId: string;
}

/**
 * Fixed width so that byte-wise (`COLLATE "C"`) order of keys equals numeric order; 36^8 (about
 * 2.8e12) entries is far beyond any corpus, and the width cannot depend on a count we only learn
 * at the end of a streaming walk.
 */
const ORDER_KEY_WIDTH = 8;
const ORDER_KEY_LIMIT = 36 ** ORDER_KEY_WIDTH;

const HTML_EXT = /\.html?$/i;

/**
 * Walks `dir` depth-first (entries of each folder sorted byte-wise by name, symlinks skipped) and
 * yields one record per folder (`category`) and per `.html`/`.htm` page (`document`), parents
 * before children, with `orderKey`s increasing byte-wise in that order.
 *
 * Folders that contain no page anywhere below them (e.g. `_images/`) yield nothing: they hold
 * media, and an empty category would only clutter the book.
 *
 * Only one page is read and parsed at a time. Bytes that are not valid UTF-8 become U+FFFD.
 * Throws the fs error (which names the path) when `dir` or an entry below it cannot be read.
 */
export async function* scanHtmlCorpus(dir: string, opts: HtmlCorpusOptions): AsyncGenerator<SeedDocument> {
  let seq = 0;
  const nextOrderKey = (): string => {
    if (seq >= ORDER_KEY_LIMIT) throw new Error(`html corpus: more than ${ORDER_KEY_LIMIT} entries`);
    return (seq++).toString(36).padStart(ORDER_KEY_WIDTH, '0');
  };
  // Categories are emitted only when the first page below them turns up (see docstring), so the
  // folders on the current path wait here until then.
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
        for (const folder of pending) {
          if (folder.emitted) continue;
          folder.emitted = true;
          yield categoryRecord(opts.bookId, folder.relPath, folder.parentId, folder.name, folder.mtime, nextOrderKey());
        }
        const parent = pending[pending.length - 1];
        const mtime = (await lstat(abs)).mtime;
        const html = new TextDecoder('utf-8').decode(await readFile(abs));
        const page = pageFromHtml(html, rel, entry.name.replace(HTML_EXT, ''));
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

/** What a single page contributes to its record; `contentStr` is null when the body has no text. */
interface ParsedPage {
  name: string;
  contentHtml: string;
  contentStr: string | null;
}

/**
 * Extracts name, body HTML (media URLs made root-relative) and plain text from one page's source.
 * `pagePath` is the page's path relative to the corpus root with forward slashes; `fallbackName`
 * is used when the page has neither `<title>` nor `<h1>` text. Never throws on malformed HTML.
 */
function pageFromHtml(html: string, pagePath: string, fallbackName: string): ParsedPage {
  const doc = parse(html, { sourceCodeLocationInfo: true });
  const htmlEl = findElement(doc, 'html');
  const body = htmlEl && childElement(htmlEl, 'body');

  const title = findElement(doc, 'title');
  let name = title ? collapse(textOf(title)) : '';
  if (name === '') {
    const h1 = body && findElement(body, 'h1');
    name = h1 ? collapse(textOf(h1)) : '';
  }
  if (name === '') name = collapse(fallbackName);

  const [start, end] = body ? bodyRange(body, html.length) : [0, html.length];
  const { html: contentHtml } = rewriteCorpusUrls(html.slice(start, end), pagePath);

  const text = body ? plainText(body) : '';
  return { name, contentHtml, contentStr: text === '' ? null : text };
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

// ---------------------------------------------------------------------------------------------
// Tree helpers

const HTML_NS = 'http://www.w3.org/1999/xhtml';

function isElement(node: T.Node): node is T.Element {
  return 'tagName' in node;
}

function isText(node: T.Node): node is T.TextNode {
  return node.nodeName === '#text';
}

function children(node: T.Node): T.ChildNode[] {
  return 'childNodes' in node ? node.childNodes : [];
}

function childElement(node: T.ParentNode, tag: string): T.Element | undefined {
  return node.childNodes.find((c): c is T.Element => isElement(c) && c.tagName === tag);
}

/** First HTML-namespace element named `tag` in document order (an SVG `<title>` does not count). */
function findElement(root: T.Node, tag: string): T.Element | undefined {
  const stack: T.Node[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (isElement(node) && node.tagName === tag && node.namespaceURI === HTML_NS) return node;
    const kids = children(node);
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]!);
  }
  return undefined;
}

const SKIPPED = new Set(['script', 'style', 'noscript', 'template']);

function textOf(node: T.Node): string {
  if (isText(node)) return node.value;
  if (isElement(node) && SKIPPED.has(node.tagName)) return '';
  return children(node).map(textOf).join('');
}

/** ASCII whitespace as HTML defines it; a no-break space is content, not layout. */
function collapse(s: string): string {
  return s.replace(/[\t\n\f\r ]+/g, ' ').trim();
}

/**
 * Offsets of the body's inner HTML. The tags' own positions are preferred over the first and last
 * child's: parse5 appends whitespace found after `</body>` to the body's last text node, so that
 * child's end can lie past `</body>`.
 */
function bodyRange(body: T.Element, length: number): [number, number] {
  const loc = body.sourceCodeLocation;
  const located = body.childNodes.filter((c) => c.sourceCodeLocation);
  const first = located[0]?.sourceCodeLocation;
  const last = located[located.length - 1]?.sourceCodeLocation;
  const start = loc?.startTag?.endOffset ?? first?.startOffset;
  if (start === undefined) return [0, length]; // neither a <body> tag nor any content in it
  const end = loc?.endTag?.startOffset ?? last?.endOffset ?? start;
  return [start, Math.max(start, Math.min(end, length))];
}

const BLOCKS = new Set([
  'address', 'article', 'aside', 'blockquote', 'body', 'br', 'caption', 'center', 'dd', 'details',
  'dialog', 'dir', 'div', 'dl', 'dt', 'fieldset', 'figcaption', 'figure', 'footer', 'form', 'h1',
  'h2', 'h3', 'h4', 'h5', 'h6', 'header', 'hgroup', 'hr', 'legend', 'li', 'listing', 'main', 'menu',
  'nav', 'ol', 'option', 'p', 'pre', 'section', 'summary', 'table', 'tbody', 'tfoot', 'thead', 'tr',
  'ul', 'xmp',
]);

function plainText(body: T.Element): string {
  const out: string[] = [];
  const visit = (node: T.Node): void => {
    if (isText(node)) {
      out.push(node.value.replace(/[\t\n\f\r ]+/g, ' '));
      return;
    }
    if (!isElement(node)) return;
    if (SKIPPED.has(node.tagName)) return;
    const block = BLOCKS.has(node.tagName);
    if (block) out.push('\n');
    // Cells of a row read as one line, like a spreadsheet row.
    else if (node.tagName === 'td' || node.tagName === 'th') out.push(' ');
    for (const c of node.childNodes) visit(c);
    if (block) out.push('\n');
  };
  visit(body);
  return out
    .join('')
    .replace(/ *\n[ \n]*/g, '\n')
    .replace(/ {2,}/g, ' ')
    .trim();
}
