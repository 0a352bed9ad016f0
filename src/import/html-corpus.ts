/**
 * Scanner behind `kb-export import-html`: turns a folder of HTML pages into seed document records
 * (seed-format.md). Pure apart from reading the folder; the command and the database writer live
 * elsewhere.
 */
import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'parse5';
import type { DefaultTreeAdapterTypes as T, Token } from 'parse5';
import { SAXParser } from 'parse5-sax-parser';
import type { StartTag } from 'parse5-sax-parser';
import type { SeedDocument } from '../load/seed-types.js';

export interface HtmlCorpusOptions {
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
        const page = await pageFromHtml(html, rel, entry.name.replace(HTML_EXT, ''));
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
export interface ParsedPage {
  name: string;
  contentHtml: string;
  contentStr: string | null;
  /** How many attribute values were rewritten to root-relative URLs. */
  rewrittenUrls: number;
}

/**
 * Extracts name, body HTML (media URLs made root-relative) and plain text from one page's source.
 * `pagePath` is the page's path relative to the corpus root with forward slashes; `fallbackName`
 * is used when the page has neither `<title>` nor `<h1>` text. Never throws on malformed HTML.
 */
export async function pageFromHtml(html: string, pagePath: string, fallbackName: string): Promise<ParsedPage> {
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
  const { html: contentHtml, count } = await rewriteMediaUrls(html.slice(start, end), pagePath);

  const text = body ? plainText(body) : '';
  return { name, contentHtml, contentStr: text === '' ? null : text, rewrittenUrls: count };
}

/**
 * Resolves a media/attachment URL found in page `pagePath` (relative to the corpus root, e.g.
 * `library/os.html`) into a root-relative URL (`../_images/x.png` -> `/_images/x.png`).
 * URLs with a scheme, protocol-relative (`//`), fragment-only (`#`), already root-relative or
 * empty are returned unchanged; `..` above the root is clamped to the root. `?query` and
 * `#fragment` are kept as written; surrounding whitespace is kept too.
 */
export function resolveCorpusUrl(url: string, pagePath: string): string {
  const m = /^([\t\n\f\r ]*)(.*?)([\t\n\f\r ]*)$/s.exec(url);
  const lead = m?.[1] ?? '';
  const core = m?.[2] ?? url;
  const trail = m?.[3] ?? '';
  if (
    core === '' ||
    core.startsWith('/') ||
    core.startsWith('#') ||
    // Browsers read `\\host` like `//host` for http(s), so it is not a path either.
    core.startsWith('\\') ||
    /^[A-Za-z][A-Za-z0-9+.-]*:/.test(core)
  ) {
    return url;
  }
  const cut = core.search(/[?#]/);
  const path = cut === -1 ? core : core.slice(0, cut);
  const suffix = cut === -1 ? '' : core.slice(cut);

  const segments = pagePath.replace(/^\/+/, '').split('/');
  const file = segments.pop() ?? '';
  // `?q` alone refers to the page itself, as in a browser.
  if (path === '') return `${lead}/${[...segments, file].join('/')}${suffix}${trail}`;

  const parts = path.split('/');
  for (const part of parts) {
    // The URL standard also treats percent-encoded dots as dot segments; clamping must see them.
    const p = part.toLowerCase();
    if (p === '.' || p === '%2e') continue;
    if (p === '..' || p === '.%2e' || p === '%2e.' || p === '%2e%2e') {
      segments.pop();
      continue;
    }
    segments.push(part);
  }
  const last = parts[parts.length - 1]?.toLowerCase() ?? '';
  const dirLike = last === '' || last === '.' || last === '..' || last === '%2e' || last === '.%2e' || last === '%2e.' || last === '%2e%2e';
  const joined = segments.filter((s, i) => s !== '' || i === segments.length - 1).join('/');
  const resolved = `/${joined}${dirLike && joined !== '' && !joined.endsWith('/') ? '/' : ''}`;
  return `${lead}${resolved}${suffix}${trail}`;
}

// ---------------------------------------------------------------------------------------------
// Records

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

// ---------------------------------------------------------------------------------------------
// URL rewriting

/** Which attributes of which elements hold media URLs; `a href` only for attachments. */
const URL_ATTRS: Record<string, readonly string[]> = {
  img: ['src', 'srcset'],
  source: ['src', 'srcset'],
  video: ['src', 'poster'],
  audio: ['src'],
  track: ['src'],
  embed: ['src'],
  object: ['data'],
  a: ['href'],
};

interface Splice {
  start: number;
  end: number;
  text: string;
}

/**
 * Rewrites media URLs in `html` (a body's inner HTML) to root-relative ones, splicing only the
 * changed attribute values so every other byte stays as written.
 */
async function rewriteMediaUrls(html: string, pagePath: string): Promise<{ html: string; count: number }> {
  // Cheap pre-check: most pages of a manual have no media at all, and the SAX pass costs a parse.
  if (!/<(img|source|video|audio|track|embed|object|a)[\s/>]/i.test(html)) return { html, count: 0 };

  const splices: Splice[] = [];
  const parser = new SAXParser({ sourceCodeLocationInfo: true });
  parser.on('startTag', (tag: StartTag) => {
    const names = URL_ATTRS[tag.tagName];
    // Start-tag tokens carry attribute locations; the SAX typings only declare the base shape.
    const loc = tag.sourceCodeLocation as Token.LocationWithAttributes | null | undefined;
    if (!names || !loc?.attrs) return;
    if (tag.tagName === 'a' && !tag.attrs.some((a) => a.name === 'download' || (a.name === 'data-type' && a.value === 'attachment'))) {
      return;
    }
    const seen = new Set<string>();
    for (const attr of tag.attrs) {
      // The tokenizer drops duplicate attributes, so only the first one is the element's value.
      if (attr.prefix || seen.has(attr.name) || !names.includes(attr.name)) continue;
      seen.add(attr.name);
      const aloc = loc.attrs[attr.name];
      if (!aloc) continue;
      const rewrite = attr.name === 'srcset' ? (v: string) => rewriteSrcset(v, pagePath) : (v: string) => resolveCorpusUrl(v, pagePath);
      if (rewrite(attr.value) === attr.value) continue;
      const splice = valueSplice(html, aloc.startOffset, aloc.endOffset, attr.value, rewrite);
      if (splice) splices.push(splice);
    }
  });
  // SAXParser is a Transform stream: it passes the text through, and with nobody reading it
  // would stall once its buffer is full. Flowing with no 'data' listener drops the text instead.
  parser.resume();
  await new Promise<void>((resolve, reject) => {
    parser.once('error', reject);
    parser.once('finish', resolve);
    parser.end(html);
  });

  if (splices.length === 0) return { html, count: 0 };
  splices.sort((a, b) => a.start - b.start);
  const out: string[] = [];
  let at = 0;
  for (const s of splices) {
    out.push(html.slice(at, s.start), s.text);
    at = s.end;
  }
  out.push(html.slice(at));
  return { html: out.join(''), count: splices.length };
}

/**
 * Locates the value inside the attribute source `html[start, end)` (`name = "value"`, `'value'`
 * or unquoted) and returns the replacement for just that value. The raw text is rewritten when it
 * holds no character reference (keeping CRLF and the like as written); otherwise the decoded value
 * is rewritten and re-escaped.
 */
function valueSplice(
  html: string,
  start: number,
  end: number,
  decoded: string,
  rewrite: (v: string) => string,
): Splice | undefined {
  const src = html.slice(start, end);
  const eq = src.indexOf('=');
  if (eq === -1) return undefined;
  let vs = eq + 1;
  while (vs < src.length && /[\t\n\f\r ]/.test(src[vs]!)) vs++;
  const quote = src[vs] === '"' || src[vs] === "'" ? src[vs]! : '';
  const valueStart = vs + quote.length;
  const valueEnd = quote && src.endsWith(quote) && src.length > valueStart ? src.length - 1 : src.length;
  const raw = src.slice(valueStart, valueEnd);
  let text: string;
  if (!raw.includes('&')) {
    text = rewrite(raw);
  } else {
    text = rewrite(decoded).replace(/&/g, '&amp;');
    if (quote === '"') text = text.replace(/"/g, '&quot;');
    if (quote === "'") text = text.replace(/'/g, '&#39;');
  }
  if (quote === '' && /[\t\n\f\r "'=<>`]/.test(text)) {
    return { start: start + valueStart, end: start + valueEnd, text: `"${text.replace(/"/g, '&quot;')}"` };
  }
  return { start: start + valueStart, end: start + valueEnd, text };
}

/**
 * Rewrites each candidate URL of a `srcset`, leaving descriptors, commas and whitespace as they
 * are. Follows the HTML candidate-splitting rules closely enough for real pages: a URL is a run of
 * non-whitespace; trailing commas belong to the separator; descriptors run to the next comma
 * outside parentheses.
 */
function rewriteSrcset(value: string, pagePath: string): string {
  const out: string[] = [];
  let i = 0;
  const n = value.length;
  const ws = (c: string | undefined) => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f';
  while (i < n) {
    const sepStart = i;
    while (i < n && (ws(value[i]) || value[i] === ',')) i++;
    out.push(value.slice(sepStart, i));
    if (i >= n) break;
    const urlStart = i;
    while (i < n && !ws(value[i])) i++;
    let urlEnd = i;
    while (urlEnd > urlStart && value[urlEnd - 1] === ',') urlEnd--;
    out.push(resolveCorpusUrl(value.slice(urlStart, urlEnd), pagePath), value.slice(urlEnd, i));
    if (urlEnd < i) continue; // the URL's trailing comma already ended this candidate
    const descStart = i;
    let depth = 0;
    while (i < n) {
      const c = value[i];
      if (c === '(') depth++;
      else if (c === ')') depth = Math.max(0, depth - 1);
      else if (c === ',' && depth === 0) break;
      i++;
    }
    out.push(value.slice(descStart, i));
  }
  return out.join('');
}
