/**
 * HTML to Markdown with the unified pipeline: rehype-parse (the HTML as a fragment), rehype-remark,
 * remark-gfm (tables, strikethrough, task lists) and remark-stringify. Chosen over turndown after
 * comparing both on pages of the PostgreSQL manual (bench/mirror-converters.md): turndown wrote
 * `<pre>` blocks as indented code without their language and broke tables with `colspan`, where
 * this pipeline wrote fenced blocks and well-formed tables, at two to four times turndown's time.
 * Runs in a worker (convert-pool.ts), so its cost on hostile input is bounded by a timeout there.
 */
import rehypeParse from 'rehype-parse';
import rehypeRemark from 'rehype-remark';
import remarkGfm from 'remark-gfm';
import remarkStringify from 'remark-stringify';
import { unified } from 'unified';

/** Elements nested deeper than this are refused: the conversion recurses once per level. */
export const MAX_DEPTH = 256;

/** The input is one the converter is not given (too deeply nested); the page keeps its HTML. */
export class NotConvertible extends Error {}

const parser = unified().use(rehypeParse, { fragment: true });
const converter = unified()
  .use(rehypeRemark)
  .use(remarkGfm, { tablePipeAlign: false })
  .use(remarkStringify, { bullet: '-', fences: true, rule: '-' });

/** The deepest element nesting of a tree, walked with a stack. */
function depthOf(root: { children?: unknown[] }): number {
  let max = 0;
  const stack: { node: { children?: unknown[] }; depth: number }[] = [{ node: root, depth: 0 }];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    if (top.depth > max) max = top.depth;
    if (max > MAX_DEPTH) return max;
    for (const child of top.node.children ?? [])
      stack.push({ node: child as { children?: unknown[] }, depth: top.depth + 1 });
  }
  return max;
}

/** Each `<a href>` whose value is a key of `hrefs` gets that key's value (links to other pages of the mirror). */
function relink(root: { children?: unknown[] }, hrefs: ReadonlyMap<string, string>): void {
  const stack: unknown[] = [root];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const n = node as { tagName?: string; properties?: { href?: unknown }; children?: unknown[] };
    if (n.tagName === 'a' && typeof n.properties?.href === 'string') {
      const to = hrefs.get(n.properties.href);
      if (to !== undefined) n.properties.href = to;
    }
    if (n.children) stack.push(...n.children);
  }
}

/**
 * `html` as Markdown (no trailing blank lines, one final newline, '' for no content), its links
 * named in `hrefs` replaced. Throws NotConvertible.
 */
export function htmlToMarkdown(html: string, hrefs: ReadonlyMap<string, string> = new Map()): string {
  const hast = parser.parse(html);
  const depth = depthOf(hast);
  if (depth > MAX_DEPTH) throw new NotConvertible(`markup nested more than ${MAX_DEPTH} levels deep`);
  if (hrefs.size > 0) relink(hast, hrefs);
  const mdast = converter.runSync(hast);
  const text = converter.stringify(mdast as Parameters<typeof converter.stringify>[0]);
  const trimmed = text.replace(/\s+$/, '');
  return trimmed === '' ? '' : `${trimmed}\n`;
}
