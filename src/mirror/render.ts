/**
 * The tree of a mirror brought to what the export file (`.kb-export/export.ndjson`, kept whole by
 * the incremental backup) holds, touching only what differs. Two passes over the file, one
 * document in memory at a time: the first gathers each document's place in the tree (tree.ts, a
 * NodeMeta and a digest per document, no content); then the files no document uses any more go
 * (and folders left empty); the second writes each page whose document, path, link targets or rendering changed,
 * and only when its bytes differ, through a temporary file and a rename, so an untouched page
 * keeps its bytes and mtime. SUMMARY.md (or index.html) last, then the index (state.ts).
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { readExport } from '../backup/export-reader.js';
import type { ConvertPool } from './convert-pool.js';
import {
  DocLinks,
  frontmatter,
  htmlDocument,
  htmlPage,
  linkedCover,
  markdownPage,
  withoutScripts,
  type ExportDoc,
  type MediaLinks,
} from './page.js';
import type { IndexEntry, MirrorState, StateDir } from './state.js';
import { layout, linkPath, summaryMarkdown, walk, type Layout, type NodeMeta } from './tree.js';

/** What renderMirror is given: the mirror, the last and this run's state, how to link media, the converter and where to log. */
export interface RenderOptions {
  state: StateDir;
  /** The state this run writes; `render` differing from the last run's means every page is rendered again. */
  next: MirrorState;
  previous: MirrorState | null;
  links: MediaLinks;
  pool: ConvertPool;
  /** Pages converted at once. */
  window: number;
  log: (line: string) => void;
  /** Told of each page done (written or not), of `total`. */
  progress?: (done: number, total: number) => void;
}

/** What a run did to the tree, in documents (a moved page counts once, as moved). */
export interface RenderCounts {
  added: number;
  changed: number;
  moved: number;
  deleted: number;
  unchanged: number;
  /** Markdown pages that kept their HTML. */
  fallbacks: number;
}

interface Scan {
  nodes: Map<string, NodeMeta>;
  digests: Map<string, string>;
  bookName: string;
}

const digest = (doc: unknown) => createHash('sha256').update(JSON.stringify(doc)).digest('hex').slice(0, 32);

async function scan(file: string): Promise<Scan> {
  const nodes = new Map<string, NodeMeta>();
  const digests = new Map<string, string>();
  let bookName = '';
  for await (const r of readExport(file, true)) {
    if (r.kind === 'book') bookName = String(r.book.name ?? r.book.slug ?? '');
    else {
      const d = r.document as unknown as ExportDoc;
      const { id, parentId, type, slug, name: title, orderKey, createdAt } = d;
      nodes.set(id, { id, parentId, type, slug, title, orderKey, createdAt });
      digests.set(id, digest(d));
    }
  }
  return { nodes, digests, bookName };
}

/** Brings the tree in `o.state.dir` to the export file. Throws on a file that cannot be written (nothing after it is). */
export async function renderMirror(o: RenderOptions): Promise<RenderCounts> {
  const ext = o.next.format === 'html' ? '.html' : '.md';
  const { nodes, digests, bookName } = await scan(o.state.exportFile);
  const tree = layout(nodes, ext);
  const old = await o.state.readIndex();
  await o.state.writeNext(tree.paths.values());
  const live = new Set(tree.paths.values());
  const counts: RenderCounts = { added: 0, changed: 0, moved: 0, deleted: 0, unchanged: 0, fallbacks: 0 };
  for (const id of old.entries.keys()) if (!nodes.has(id)) counts.deleted++;
  await removeStale(
    o.state.dir,
    [...old.paths].filter((p) => !live.has(p)),
  );
  const docLinks = new DocLinks(slugPaths(nodes, tree));
  const entries = await writePages(o, tree, docLinks, digests, old.entries, counts);
  const top =
    o.next.format === 'html' ? htmlIndex(tree, nodes, bookName) : summaryMarkdown(tree, nodes, bookName || 'Summary');
  await writeIfDifferent(
    o.state,
    path.join(o.state.dir, o.next.format === 'html' ? 'index.html' : 'SUMMARY.md'),
    Buffer.from(top),
  );
  const sorted = [...entries.values()].sort((a, b) => (a.path < b.path ? -1 : 1));
  await o.state.commit(sorted, o.next);
  return counts;
}

/** Each slug's page: among documents sharing a slug, the first created (then smallest id), as names.ts settles collisions. */
function slugPaths(nodes: ReadonlyMap<string, NodeMeta>, tree: Layout): Map<string, string> {
  const bySlug = new Map<string, string>();
  const sorted = [...nodes.values()].sort((a, b) =>
    a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1,
  );
  for (const n of sorted) if (!bySlug.has(n.slug)) bySlug.set(n.slug, tree.paths.get(n.id)!);
  return bySlug;
}

/** A digest of the links a page makes to other pages ('' for none): a page whose targets moved is written again. */
const linksDigest = (hrefs: ReadonlyMap<string, string>) =>
  hrefs.size === 0
    ? ''
    : createHash('sha256')
        .update(JSON.stringify([...hrefs].sort()))
        .digest('hex')
        .slice(0, 32);

/** Removes files of the mirror no document uses now, then the folders that left empty (never DIR itself). */
async function removeStale(dir: string, stale: string[]): Promise<void> {
  const folders = new Set<string>();
  for (const rel of stale) {
    await rm(path.join(dir, ...rel.split('/')), { force: true });
    for (let f = path.posix.dirname(rel); f !== '.'; f = path.posix.dirname(f)) folders.add(f);
  }
  const deepestFirst = [...folders].sort((a, b) => b.split('/').length - a.split('/').length || (a < b ? -1 : 1));
  for (const f of deepestFirst) {
    await rmdir(path.join(dir, ...f.split('/'))).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST' && err.code !== 'ENOENT' && err.code !== 'ENOTDIR')
        throw err;
    });
  }
}

/** Replaces `file` with `bytes` when it holds anything else (a temporary file renamed over it); true when written. */
export async function writeIfDifferent(state: StateDir, file: string, bytes: Buffer): Promise<boolean> {
  const current = await readFile(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
    if (err.code === 'EISDIR') throw new Error(`${file} is a folder, where the mirror puts a page`);
    throw err;
  });
  if (current !== null && current.equals(bytes)) return false;
  await mkdir(path.dirname(file), { recursive: true });
  const tmp = state.tempName();
  await writeFile(tmp, bytes);
  await rename(tmp, file);
  return true;
}

/** What writing the pages of one run shares. */
interface PageRun {
  o: RenderOptions;
  tree: Layout;
  docLinks: DocLinks;
  digests: Map<string, string>;
  old: Map<string, IndexEntry>;
  counts: RenderCounts;
  entries: Map<string, IndexEntry>;
  /** The last run rendered pages as this one does (its `render` is the same). */
  sameRender: boolean;
}

/** One document's page: left alone when its document, path and link targets are as the index says and its file has the size listed; else rendered and written if its bytes differ. */
async function writePage(c: PageRun, doc: ExportDoc): Promise<void> {
  const rel = c.tree.paths.get(doc.id)!;
  const file = path.join(c.o.state.dir, ...rel.split('/'));
  const sha256 = c.digests.get(doc.id)!;
  const before = c.old.get(doc.id);
  const hrefs = c.docLinks.hrefsOf(doc.contentHtml ?? '', rel);
  const links = linksDigest(hrefs);
  if (c.sameRender && before?.path === rel && before.sha256 === sha256 && (before.links ?? '') === links) {
    const size = await stat(file).then(
      (s) => (s.isFile() ? s.size : -1),
      () => -1,
    );
    if (size === before.size) {
      c.counts.unchanged++;
      c.entries.set(doc.id, before);
      return;
    }
  }
  const bytes = Buffer.from(await pageOf(c.o, doc, rel, hrefs, c.counts));
  const written = await writeIfDifferent(c.o.state, file, bytes);
  if (before === undefined) c.counts.added++;
  else if (before.path !== rel) c.counts.moved++;
  else if (written) c.counts.changed++;
  else c.counts.unchanged++;
  c.entries.set(doc.id, { id: doc.id, path: rel, sha256, size: bytes.length, links });
}

/** Every page, `o.window` at a time, in the export file's order; the index entries of the run. Throws the first failure. */
async function writePages(
  o: RenderOptions,
  tree: Layout,
  docLinks: DocLinks,
  digests: Map<string, string>,
  old: Map<string, IndexEntry>,
  counts: RenderCounts,
): Promise<Map<string, IndexEntry>> {
  const sameRender = o.previous !== null && o.previous.render === o.next.render;
  const run: PageRun = { o, tree, docLinks, digests, old, counts, entries: new Map(), sameRender };
  const inflight = new Set<Promise<void>>();
  let failure: { err: unknown } | null = null;
  let done = 0;
  for await (const r of readExport(o.state.exportFile, true)) {
    if (r.kind !== 'document' || failure !== null) continue;
    const p: Promise<void> = writePage(run, r.document as unknown as ExportDoc)
      .then(() => o.progress?.(++done, digests.size))
      .catch((err: unknown) => {
        failure ??= { err };
      })
      .finally(() => inflight.delete(p));
    inflight.add(p);
    if (inflight.size >= o.window) await Promise.race(inflight);
  }
  await Promise.all(inflight);
  if (failure !== null) throw (failure as { err: unknown }).err;
  return run.entries;
}

/** The bytes of one page at `rel`. */
async function pageOf(
  o: RenderOptions,
  doc: ExportDoc,
  rel: string,
  hrefs: ReadonlyMap<string, string>,
  counts: RenderCounts,
): Promise<string> {
  if (o.next.format === 'html') return htmlPage(doc, rel, o.links, hrefs);
  const front = frontmatter(doc, linkedCover(doc, rel, o.links));
  const html = o.links.html(doc.contentHtml ?? '', rel);
  if (html.trim() === '') return markdownPage(front, { markdown: '' });
  const r = await o.pool.convert(html, hrefs);
  if (r.ok) return markdownPage(front, { markdown: r.markdown });
  counts.fallbacks++;
  o.log(`${rel}: kept as HTML, ${r.why}`);
  return markdownPage(front, { html: withoutScripts(html, hrefs), why: r.why });
}

const escapeHtml = (s: string) => s.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

/** The HTML format's `index.html`: the whole tree as nested lists of links, readable without a script. */
export function htmlIndex(tree: Layout, nodes: ReadonlyMap<string, NodeMeta>, bookName: string): string {
  let html = '<ul>\n';
  let depth = 0;
  let first = true;
  for (const { id, depth: d } of walk(tree)) {
    if (d > depth) html += '\n<ul>\n'.repeat(d - depth);
    else {
      if (!first) html += '</li>\n';
      for (let i = d; i < depth; i++) html += '</ul>\n</li>\n';
    }
    depth = d;
    first = false;
    const n = nodes.get(id)!;
    html += `<li><a href="${linkPath(tree.paths.get(id)!)}">${escapeHtml(n.title || n.slug)}</a>`;
  }
  if (!first) html += '</li>\n';
  for (let i = 0; i < depth; i++) html += '</ul>\n</li>\n';
  html += '</ul>';
  return htmlDocument(bookName || 'Contents', `<nav>\n${html}\n</nav>`, null);
}
