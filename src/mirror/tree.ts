/**
 * Where each document of a mirror goes: the knowledge base's hierarchy as folders. A category, and
 * a document with children, is a folder holding its own page as `index.md` (`index.html`); any
 * other document is a file beside its siblings. Names come from slugs (names.ts). Siblings are in
 * D1's order (orderKey, then id, byte-wise), which SUMMARY.md and the HTML index keep.
 * A parentId that names no exported document puts the document at the top; so does a cycle of
 * parents (each of its members), so every layout is a tree whatever the data.
 * Memory: one NodeMeta per document (no content), held for the whole run: the tree needs every
 * parent before any path is known.
 */
import { safeBaseName, uniqueNames, type NameRequest } from './names.js';

/** What the layout needs of a document: no content, a few hundred bytes. */
export interface NodeMeta {
  id: string;
  parentId: string | null;
  type: string;
  slug: string;
  title: string;
  orderKey: string;
  createdAt: string;
}

/** The layout of a mirror: each document's path (relative, `/`-separated) and the tree in order. */
export interface Layout {
  paths: Map<string, string>;
  /** Children of each folder document, and of the top (null), in sibling order. */
  children: Map<string | null, string[]>;
}

/** File names the mirror's top folder keeps for itself (lower case, no extension). */
const TOP_RESERVED = new Set(['index', 'summary', 'media']);
const RESERVED = new Set(['index']);

const byteCompare = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** D1's order of two documents. */
export function siblingOrder(a: NodeMeta, b: NodeMeta): number {
  return byteCompare(a.orderKey, b.orderKey) || byteCompare(a.id, b.id);
}

/** The parent a document has in the mirror: its parentId when that is exported and no cycle goes through it, else null. */
function effectiveParents(nodes: ReadonlyMap<string, NodeMeta>): Map<string, string | null> {
  const parent = new Map<string, string | null>();
  for (const n of nodes.values()) parent.set(n.id, n.parentId !== null && nodes.has(n.parentId) ? n.parentId : null);
  // A node on a cycle reaches itself; walking with a visited set per start finds them all.
  const state = new Map<string, 'done' | 'cycle'>();
  for (const id of parent.keys()) {
    if (state.has(id)) continue;
    const path: string[] = [];
    const onPath = new Set<string>();
    let at: string | null = id;
    while (at !== null && !state.has(at) && !onPath.has(at)) {
      path.push(at);
      onPath.add(at);
      at = parent.get(at) ?? null;
    }
    if (at !== null && onPath.has(at)) {
      for (let i = path.indexOf(at); i < path.length; i++) state.set(path[i]!, 'cycle');
    }
    for (const p of path) if (!state.has(p)) state.set(p, 'done');
  }
  for (const [id, s] of state) if (s === 'cycle') parent.set(id, null);
  return parent;
}

/** Lays out every document with `ext` (`.md` or `.html`) as the file extension. */
export function layout(nodes: ReadonlyMap<string, NodeMeta>, ext: string): Layout {
  const parent = effectiveParents(nodes);
  const children = new Map<string | null, string[]>([[null, []]]);
  for (const [id, p] of parent) {
    const list = children.get(p);
    if (list === undefined) children.set(p, [id]);
    else list.push(id);
  }
  for (const list of children.values()) list.sort((a, b) => siblingOrder(nodes.get(a)!, nodes.get(b)!));
  const isFolder = (id: string) => nodes.get(id)!.type === 'category' || children.has(id);
  const paths = new Map<string, string>();
  // Folders are named from the top down: a child's path needs its parent's.
  const queue: { id: string | null; dir: string }[] = [{ id: null, dir: '' }];
  for (let i = 0; i < queue.length; i++) {
    const q = queue[i]!;
    const kids = children.get(q.id) ?? [];
    const reserved = q.id === null ? TOP_RESERVED : RESERVED;
    const requests: NameRequest[] = kids.map((id) => {
      const n = nodes.get(id)!;
      return { id, createdAt: n.createdAt, base: safeBaseName(n.slug, reserved), ext: isFolder(id) ? '' : ext };
    });
    const names = uniqueNames(requests, q.id === null ? new Set([`summary.md`, `index${ext}`, 'media']) : new Set());
    for (const id of kids) {
      const name = names.get(id)!;
      const rel = q.dir === '' ? name : `${q.dir}/${name}`;
      if (isFolder(id)) {
        paths.set(id, `${rel}/index${ext}`);
        queue.push({ id, dir: rel });
      } else paths.set(id, rel);
    }
  }
  return { paths, children };
}

/** `to` relative to the folder of file `from` (both mirror paths), `/`-separated. */
export function relativeLink(from: string, to: string): string {
  const up = from.split('/').length - 1;
  return `${'../'.repeat(up)}${to}`;
}

/** A mirror path as a link target: each segment percent-encoded, so spaces and `#` survive. */
export function linkPath(p: string): string {
  return p
    .split('/')
    .map((s) => encodeURIComponent(s))
    .join('/');
}

/** The tree in depth-first order with each document's depth (0 at the top); a stack, not recursion, so depth is unbounded. */
export function* walk(tree: Layout): Generator<{ id: string; depth: number }> {
  const stack: { ids: string[]; next: number }[] = [{ ids: tree.children.get(null) ?? [], next: 0 }];
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.next >= top.ids.length) {
      stack.pop();
      continue;
    }
    const id = top.ids[top.next++]!;
    yield { id, depth: stack.length - 1 };
    const kids = tree.children.get(id);
    if (kids !== undefined) stack.push({ ids: kids, next: 0 });
  }
}

/** Markdown link text: brackets and backslashes escaped, line breaks as spaces. */
const linkText = (s: string) => s.replace(/[\\[\]]/g, (c) => `\\${c}`).replace(/\s+/g, ' ');

/** `SUMMARY.md` (the mdBook and GitBook convention): every document, nested by the tree, in sibling order. */
export function summaryMarkdown(tree: Layout, nodes: ReadonlyMap<string, NodeMeta>, bookName: string): string {
  const lines = [`# ${linkText(bookName)}`, ''];
  for (const { id, depth } of walk(tree)) {
    const n = nodes.get(id)!;
    lines.push(`${'  '.repeat(depth)}- [${linkText(n.title || n.slug)}](${linkPath(tree.paths.get(id)!)})`);
  }
  return `${lines.join('\n')}\n`;
}
