/** What the mirror tests read of a mirror: its files byte for byte, its links, and a Markdown page's text. */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import remarkParse from 'remark-parse';
import remarkGfm from 'remark-gfm';
import { unified } from 'unified';

/** Every file below `dir` but `.kb-export/` and `.git/`, by `/`-separated relative path, in path order. */
export function treeOf(dir: string): Map<string, Buffer> {
  const files: [string, Buffer][] = [];
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    const rel = path.relative(dir, path.join(e.parentPath, e.name)).split(path.sep).join('/');
    if (!e.isFile() || /^(\.kb-export|\.git)\//.test(rel)) continue;
    files.push([rel, readFileSync(path.join(dir, rel))]);
  }
  return new Map(files.sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** The text of a Markdown body (frontmatter already cut), as remark parses it: every text and code value, spaced, white space collapsed. */
export function markdownText(markdown: string): string {
  const tree = unified().use(remarkParse).use(remarkGfm).parse(markdown);
  const out: string[] = [];
  const stack: unknown[] = [tree];
  while (stack.length > 0) {
    const node = stack.pop() as { type: string; value?: string; children?: unknown[] };
    if (typeof node.value === 'string' && node.type !== 'html') out.push(node.value);
    if (node.children) stack.push(...[...node.children].reverse());
  }
  return out
    .join(' ')
    .replace(/\s+/g, ' ')
    .replace(/ ([.,;:])/g, '$1')
    .trim();
}

/** The relative links and images of a page (Markdown or HTML): href, src, data and srcset values and Markdown link targets, no scheme, no `#` alone; in Markdown, none inside code. */
export function relativeTargets(text: string): string[] {
  const found: string[] = [];
  const urls: string[] = [];
  // In Markdown, code spans and fenced blocks are text, whatever markup they show.
  const scanned = text.startsWith('<!doctype') ? text : text.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  for (const m of scanned.matchAll(/\b(href|src|data|srcset)="([^"]*)"|\]\(<?([^)\s>]+)>?\)/g)) {
    if (m[1] === 'srcset') urls.push(...m[2]!.split(',').map((c) => c.trim().split(/\s+/)[0]!));
    else urls.push(m[2] ?? m[3]!);
  }
  for (const url of urls) {
    if (url === '' || url.startsWith('#') || /^[A-Za-z][A-Za-z0-9+.-]*:/.test(url) || url.startsWith('//')) continue;
    found.push(url.replace(/[#?].*$/, ''));
  }
  return found;
}
