/**
 * The tree of a mirror brought to what the export file (`.kb-export/export.ndjson`, kept whole by
 * the incremental backup) holds, touching only what differs. Two passes over the file, one
 * document in memory at a time: the first gathers each document's place in the tree into an index
 * on disk (tree.ts: no content, bounded memory whatever the size, D14.6); then the files no
 * document uses any more go (and folders left empty); the second writes each page whose document,
 * path, link targets or rendering changed, and only when its bytes differ (files.ts).
 * SUMMARY.md (or index.html) last, then the index of pages (state.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { readExport } from '../backup/export-reader.js';
import { SortedSpill } from '../backup/sorted-spill.js';
import type { ConvertPool } from './convert-pool.js';
import { DiskTable } from './disk-table.js';
import { LineReader, LineWriter } from './line-files.js';
import { removeStale, writeIfDifferent, writePartsIfDifferent } from './files.js';
import {
  DocLinks,
  frontmatter,
  htmlDocumentParts,
  htmlPage,
  linkedCover,
  markdownPage,
  withoutScripts,
  type ExportDoc,
  type MediaLinks,
} from './page.js';
import type { IndexEntry, MirrorState, StateDir } from './state.js';
import { linkPath, summaryLines, TreeIndex } from './tree.js';

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

const digest = (doc: unknown) => createHash('sha256').update(JSON.stringify(doc)).digest('hex').slice(0, 32);

/** The tables of one run, on disk under `.kb-export/tmp/`; `close()` removes them. */
class RunIndex {
  readonly tree: TreeIndex;
  /** The last run's index entries, by id. */
  readonly old: DiskTable<IndexEntry>;
  /** Paths this run uses. */
  readonly live: DiskTable<1>;
  /** Each slug's document: the first created (then smallest id), and its path. */
  readonly slugs: DiskTable<{ c: string; i: string; p: string }>;
  bookName = '';

  constructor(
    readonly work: string,
    ext: string,
  ) {
    this.tree = new TreeIndex(path.join(work, 'tree'), ext);
    this.old = new DiskTable(path.join(work, 'old'));
    this.live = new DiskTable(path.join(work, 'live'));
    this.slugs = new DiskTable(path.join(work, 'slugs'));
  }

  close(): void {
    this.tree.close();
    this.old.close();
    this.live.close();
    this.slugs.close();
    rmSync(this.work, { recursive: true, force: true });
  }
}

/** The first pass: every document's place, into the run's tree index. */
async function scan(file: string, run: RunIndex): Promise<void> {
  for await (const r of readExport(file, true)) {
    if (r.kind === 'book') run.bookName = String(r.book.name ?? r.book.slug ?? '');
    else {
      const d = r.document as unknown as ExportDoc;
      const { id, parentId, type, slug, name: title, orderKey, createdAt } = d;
      run.tree.add({ id, parentId, type, slug, title, orderKey, createdAt }, digest(d));
    }
  }
}

/** Brings the tree in `o.state.dir` to the export file. Throws on a file that cannot be written (nothing after it is). */
export async function renderMirror(o: RenderOptions): Promise<RenderCounts> {
  const ext = o.next.format === 'html' ? '.html' : '.md';
  const work = path.join(o.state.tmpDir, `index-${randomBytes(4).toString('hex')}`);
  await mkdir(path.join(work, 'tree'), { recursive: true });
  const run = new RunIndex(work, ext);
  try {
    return await renderWith(o, run);
  } finally {
    run.close();
  }
}

async function renderWith(o: RenderOptions, run: RunIndex): Promise<RenderCounts> {
  const { tree } = run;
  await scan(o.state.exportFile, run);
  const paths = new LineWriter(path.join(run.work, 'paths'));
  await tree.layOut((n) => {
    paths.write(n.path!);
    run.live.set(n.path!, 1);
    // Among documents sharing a slug, the first created (then smallest id), as names.ts settles collisions.
    const s = run.slugs.get(n.slug);
    if (s === undefined || n.createdAt < s.c || (n.createdAt === s.c && n.id < s.i))
      run.slugs.set(n.slug, { c: n.createdAt, i: n.id, p: n.path! });
  });
  paths.flush();
  const counts: RenderCounts = { added: 0, changed: 0, moved: 0, deleted: 0, unchanged: 0, fallbacks: 0 };
  for await (const e of o.state.entries()) {
    run.old.set(e.id, e);
    if (tree.node(e.id) === undefined) counts.deleted++;
  }
  await removeStale(
    o.state.dir,
    (async function* () {
      for await (const p of o.state.writtenPaths()) if (!run.live.has(p)) yield p;
    })(),
    o.state.dirs,
  );
  // The last runs' paths are read (above) before this run's list replaces theirs.
  const reader = new LineReader<string>(paths.fd, 0, paths.offset);
  await o.state.writeNext(
    (function* () {
      for (let p = reader.next(); p !== undefined; p = reader.next()) yield p;
    })(),
  );
  paths.close();
  const docLinks = new DocLinks({ get: (slug) => run.slugs.get(slug)?.p });
  const entries = new SortedSpill<IndexEntry>({
    compare: (a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0),
    same: () => false,
  });
  try {
    await writePages(o, run, docLinks, entries, counts);
    const top =
      o.next.format === 'html' ? htmlIndex(tree, run.bookName) : summaryLines(tree, run.bookName || 'Summary');
    await writePartsIfDifferent(
      o.state,
      path.join(o.state.dir, o.next.format === 'html' ? 'index.html' : 'SUMMARY.md'),
      top,
    );
    await o.state.commit(entries.sorted(), o.next);
  } finally {
    await entries.close();
  }
  return counts;
}

/** A digest of the links a page makes to other pages ('' for none): a page whose targets moved is written again. */
const linksDigest = (hrefs: ReadonlyMap<string, string>) =>
  hrefs.size === 0
    ? ''
    : createHash('sha256')
        .update(JSON.stringify([...hrefs].sort()))
        .digest('hex')
        .slice(0, 32);

/** What writing the pages of one run shares. */
interface PageRun {
  o: RenderOptions;
  run: RunIndex;
  docLinks: DocLinks;
  counts: RenderCounts;
  entries: SortedSpill<IndexEntry>;
  /** The last run rendered pages as this one does (its `render` is the same). */
  sameRender: boolean;
}

/** A file's size and ctime (ns, as text), or null when it is no file. */
async function fileStamp(file: string): Promise<{ size: number; ctime: string } | null> {
  const s = await stat(file, { bigint: true }).catch(() => null);
  return s === null || !s.isFile() ? null : { size: Number(s.size), ctime: String(s.ctimeNs) };
}

/**
 * One document's page: left alone when its document, path and link targets are as the index says
 * and its file has the size and ctime listed (an edit that keeps the size still changes the
 * ctime, D14.4); else rendered and written if its bytes differ.
 */
async function writePage(c: PageRun, doc: ExportDoc): Promise<IndexEntry> {
  const node = c.run.tree.node(doc.id)!;
  const rel = node.path!;
  const file = path.join(c.o.state.dir, ...rel.split('/'));
  const sha256 = node.digest;
  const before = c.run.old.get(doc.id);
  const hrefs = c.docLinks.hrefsOf(doc.contentHtml ?? '', rel);
  const links = linksDigest(hrefs);
  if (c.sameRender && before?.path === rel && before.sha256 === sha256 && (before.links ?? '') === links) {
    const now = await fileStamp(file);
    if (now !== null && now.size === before.size && now.ctime === before.ctime) {
      c.counts.unchanged++;
      return before;
    }
  }
  const bytes = Buffer.from(await pageOf(c.o, doc, rel, hrefs, c.counts));
  const written = await writeIfDifferent(c.o.state, file, bytes);
  if (before === undefined) c.counts.added++;
  else if (before.path !== rel) c.counts.moved++;
  else if (written) c.counts.changed++;
  else c.counts.unchanged++;
  const ctime = (await fileStamp(file))?.ctime ?? '';
  return { id: doc.id, path: rel, sha256, size: bytes.length, links, ctime };
}

/** Every page, `o.window` at a time, in the export file's order, its index entry added to `entries`. Throws the first failure. */
async function writePages(
  o: RenderOptions,
  run: RunIndex,
  docLinks: DocLinks,
  entries: SortedSpill<IndexEntry>,
  counts: RenderCounts,
): Promise<void> {
  const sameRender = o.previous !== null && o.previous.render === o.next.render;
  const pages: PageRun = { o, run, docLinks, counts, entries, sameRender };
  const inflight = new Set<Promise<void>>();
  let failure: { err: unknown } | null = null;
  let done = 0;
  // Entries are added in the order pages finish; the spill sorts them by path.
  let adding = Promise.resolve();
  for await (const r of readExport(o.state.exportFile, true)) {
    if (r.kind !== 'document' || failure !== null) continue;
    const p: Promise<void> = writePage(pages, r.document as unknown as ExportDoc)
      .then((entry) => {
        adding = adding.then(() => entries.add(entry, entry.path.length + entry.id.length + 160));
        return adding;
      })
      .then(() => o.progress?.(++done, run.tree.count))
      .catch((err: unknown) => {
        failure ??= { err };
      })
      .finally(() => inflight.delete(p));
    inflight.add(p);
    if (inflight.size >= o.window) await Promise.race(inflight);
  }
  await Promise.all(inflight);
  if (failure !== null) throw (failure as { err: unknown }).err;
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

/** The HTML format's `index.html`, in parts: the whole tree as nested lists of links, readable without a script. */
export function* htmlIndex(tree: TreeIndex, bookName: string): Generator<string> {
  const [head, foot] = htmlDocumentParts(bookName || 'Contents', null);
  yield `${head}<nav>\n<ul>\n`;
  let depth = 0;
  let first = true;
  for (const { node: n, depth: d } of tree.walk()) {
    let html = '';
    if (d > depth) html += '\n<ul>\n'.repeat(d - depth);
    else {
      if (!first) html += '</li>\n';
      for (let i = d; i < depth; i++) html += '</ul>\n</li>\n';
    }
    depth = d;
    first = false;
    yield `${html}<li><a href="${linkPath(n.path!)}">${escapeHtml(n.title || n.slug)}</a>`;
  }
  let end = first ? '' : '</li>\n';
  for (let i = 0; i < depth; i++) end += '</ul>\n</li>\n';
  yield `${end}</ul>\n</nav>${foot}`;
}
