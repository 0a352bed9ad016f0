/**
 * import-html's page reading as it was before html-page.ts: a parse5 tree of the whole page, its
 * body's text found by walking it. Kept as the reference the streaming reader is compared with
 * (test/import/html-page.test.ts); it holds the whole tree, so only for pages of ordinary size.
 */
import { parse } from 'parse5';
import type { DefaultTreeAdapterTypes as T } from 'parse5';
import { rewriteCorpusUrls } from '../../src/import/corpus-urls.js';

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
export function treePageFromHtml(html: string, pagePath: string, fallbackName: string): ParsedPage {
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
  'address',
  'article',
  'aside',
  'blockquote',
  'body',
  'br',
  'caption',
  'center',
  'dd',
  'details',
  'dialog',
  'dir',
  'div',
  'dl',
  'dt',
  'fieldset',
  'figcaption',
  'figure',
  'footer',
  'form',
  'h1',
  'h2',
  'h3',
  'h4',
  'h5',
  'h6',
  'header',
  'hgroup',
  'hr',
  'legend',
  'li',
  'listing',
  'main',
  'menu',
  'nav',
  'ol',
  'option',
  'p',
  'pre',
  'section',
  'summary',
  'table',
  'tbody',
  'tfoot',
  'thead',
  'tr',
  'ul',
  'xmp',
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
