/**
 * Where each document of a mirror goes: the knowledge base's hierarchy as folders. A category, and
 * a document with children, is a folder holding its own page as `index.md` (`index.html`); any
 * other document is a file beside its siblings. Names come from slugs (names.ts). Siblings are in
 * D1's order (orderKey, then id, byte-wise), which SUMMARY.md and the HTML index keep.
 * A parentId that names no exported document puts the document at the top; so does a cycle of
 * parents (each of its members), so every layout is a tree whatever the data.
 * Memory: the index is on disk (a DiskTable by id, lists of ids in files, children sorted by the
 * backup's SortedSpill), so a run holds a few buffers and one spill run whatever the size (D14.6).
 */
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { SortedSpill } from '../backup/sorted-spill.js';
import { DiskTable } from './disk-table.js';
import { uniqueNamesOnDisk } from './folder-names.js';
import { LineReader, LineWriter } from './line-files.js';
import { idTag, safeBaseName, uniqueNames, type NameRequest } from './names.js';

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

/** A document as the index keeps it: its NodeMeta, a digest, and what the layout works out. */
export interface TreeNode extends NodeMeta {
  digest: string;
  /** The parent in the mirror (null: the top); set once parents are checked. */
  parent?: string | null;
  /** 1: its chain of parents reaches the top; 2: on a cycle. */
  state?: 1 | 2;
  /** Its children's ids: bytes [kidsAt, kidsAt + kidsBytes) of the children file, `kids` of them. */
  kidsAt?: number;
  kidsBytes?: number;
  kids?: number;
  /** Its folder (relative, `/`-separated), for a folder. */
  dir?: string;
  /** Its page's path in the mirror. */
  path?: string;
}

/** File names the mirror's top folder keeps for itself (lower case, no extension). */
const TOP_RESERVED = new Set(['index', 'summary', 'media', '_deep']);
/** The longest path of a page from DIR, in UTF-16 code units (what Windows counts): room for DIR itself within Windows' 260 (D14.2). */
export const PATH_CHARS = 240;
/** Room kept in each name for a collision's suffix: `-` and 8 hex digits. */
const SUFFIX = 9;
/** Where a document goes whose folder's path leaves no room for it, named by its id (D14.2). */
const DEEP = '_deep';

/** `s` cut to at most `chars` UTF-16 code units, never inside a surrogate pair. */
function cutChars(s: string, chars: number): string {
  const cut = s.slice(0, chars);
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}
const RESERVED = new Set(['index']);
/** A folder with more children than this is named on disk (folder-names.ts). */
const IN_MEMORY_FOLDER = 4096;

const plain = (s: string) => !/[\ud800-\uffff]/.test(s);
/** Byte-wise order of two strings (UTF-8 order is code point order). */
export function byteCompare(a: string, b: string): number {
  if (plain(a) && plain(b)) return a < b ? -1 : a > b ? 1 : 0;
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** D1's order of two documents. */
export function siblingOrder(a: Pick<NodeMeta, 'orderKey' | 'id'>, b: Pick<NodeMeta, 'orderKey' | 'id'>): number {
  return byteCompare(a.orderKey, b.orderKey) || byteCompare(a.id, b.id);
}

interface Kid {
  p: string | null;
  o: string;
  i: string;
}

/** The layout of a mirror, kept in files under a work folder; `close()` removes them. */
export class TreeIndex {
  private readonly nodes: DiskTable<TreeNode>;
  private readonly used: DiskTable<1>;
  private readonly ids: LineWriter;
  private readonly kidsFile: LineWriter;
  private top = { at: 0, bytes: 0, count: 0 };
  /** Documents added. */
  count = 0;

  /** Makes `work` (a fresh folder) hold the index's files. */
  constructor(
    private readonly work: string,
    private readonly ext: string,
  ) {
    mkdirSync(work, { recursive: true });
    this.nodes = new DiskTable(path.join(work, 'nodes'));
    this.used = new DiskTable(path.join(work, 'names'));
    this.ids = new LineWriter(path.join(work, 'ids'));
    this.kidsFile = new LineWriter(path.join(work, 'kids'));
  }

  /** Adds a document (before layOut). */
  add(meta: NodeMeta, digest: string): void {
    this.nodes.set(meta.id, { ...meta, digest });
    this.ids.write(meta.id);
    this.count++;
  }

  /** The document `id` with its path (once laid out), or undefined. */
  node(id: string): TreeNode | undefined {
    return this.nodes.get(id);
  }

  /** Every document's id, in the order they were added. */
  *allIds(): Generator<string> {
    this.ids.flush();
    const r = new LineReader<string>(this.ids.fd, 0, this.ids.offset);
    for (let id = r.next(); id !== undefined; id = r.next()) yield id;
  }

  /** Works out every document's path; `placed` is told of each document once its path is known. Rejects with the file system's errors. */
  async layOut(placed: (n: TreeNode) => void = () => {}): Promise<void> {
    const spill = new SortedSpill<Kid>({
      compare: (a, b) =>
        (a.p === b.p ? 0 : a.p === null ? -1 : b.p === null ? 1 : a.p < b.p ? -1 : 1) ||
        siblingOrder({ orderKey: a.o, id: a.i }, { orderKey: b.o, id: b.i }),
      same: () => false,
    });
    try {
      await this.checkParents(spill);
      await this.sortChildren(spill);
    } finally {
      await spill.close();
    }
    await this.nameAll(placed);
  }

  /** The parent `n` has in the mirror unless it is on a cycle: its parentId when that was exported. */
  private exportedParent(n: TreeNode): string | null {
    if (n.parent !== undefined) return n.parent;
    return n.parentId !== null && this.nodes.has(n.parentId) ? n.parentId : null;
  }

  /**
   * Each document's parent in the mirror: its parentId when exported and on no cycle, else null.
   * A walk up from each document not yet settled finds a cycle by Brent's method (a node saved at
   * each power of two steps is met again), so it holds two ids whatever the depth. Each document
   * settled goes into `kids`, by parent.
   */
  private async checkParents(kids: SortedSpill<Kid>): Promise<void> {
    const settle = async (id: string, n: TreeNode) => {
      this.nodes.set(id, n);
      await kids.add({ p: n.parent!, o: n.orderKey, i: id }, id.length * 2 + n.orderKey.length + 32);
    };
    for (const id of this.allIds()) {
      if (this.nodes.get(id)!.state !== undefined) continue;
      let saved: string = id;
      let power = 1;
      let steps = 0;
      let cycle: string | null = null;
      for (let at = this.exportedParent(this.nodes.get(id)!); at !== null;) {
        const n = this.nodes.get(at)!;
        if (n.state !== undefined) break;
        if (at === saved) {
          cycle = at;
          break;
        }
        if (++steps === power) {
          saved = at;
          power *= 2;
          steps = 0;
        }
        at = this.exportedParent(n);
      }
      if (cycle !== null) {
        let c = cycle;
        do {
          const m: TreeNode = this.nodes.get(c)!;
          const up = this.exportedParent(m)!;
          await settle(c, { ...m, state: 2, parent: null });
          c = up;
        } while (c !== cycle);
      }
      for (let c: string | null = id; c !== null;) {
        const m: TreeNode = this.nodes.get(c)!;
        if (m.state !== undefined) break;
        const up = this.exportedParent(m);
        await settle(c, { ...m, state: 1, parent: up });
        c = up;
      }
    }
  }

  /** The children file: each parent's children in D1's order (from `spill`), one range of lines per parent. */
  private async sortChildren(spill: SortedSpill<Kid>): Promise<void> {
    let group: { p: string | null; at: number; count: number } | null = null;
    const close = () => {
      if (group === null) return;
      const range = { at: group.at, bytes: this.kidsFile.offset - group.at, count: group.count };
      if (group.p === null) this.top = range;
      else {
        const n = this.nodes.get(group.p)!;
        this.nodes.set(group.p, { ...n, kidsAt: range.at, kidsBytes: range.bytes, kids: range.count });
      }
    };
    for await (const k of spill.sorted()) {
      if (group === null || group.p !== k.p) {
        close();
        group = { p: k.p, at: this.kidsFile.offset, count: 0 };
      }
      this.kidsFile.write(k.i);
      group.count++;
    }
    close();
    this.kidsFile.flush();
  }

  /** The children of `id` (null: the top) in D1's order; `chunk`: bytes read at a time. */
  *children(id: string | null, chunk = 64 * 1024): Generator<string> {
    const n = id === null ? null : this.nodes.get(id)!;
    const at = n === null ? this.top.at : (n.kidsAt ?? 0);
    const bytes = n === null ? this.top.bytes : (n.kidsBytes ?? 0);
    if (bytes === 0) return;
    const r = new LineReader<string>(this.kidsFile.fd, at, at + bytes, chunk);
    for (let kid = r.next(); kid !== undefined; kid = r.next()) yield kid;
  }

  private isFolder(n: TreeNode): boolean {
    return n.type === 'category' || (n.kids ?? 0) > 0;
  }

  /** Folders named from the top down, through a queue of folders in a file: a child's path needs its parent's. */
  private async nameAll(placed: (n: TreeNode) => void): Promise<void> {
    const queue = new LineWriter(path.join(this.work, 'queue'));
    try {
      const pending = new LineReader<string>(queue.fd, 0, 0);
      await this.nameFolder(null, '', queue, placed);
      for (;;) {
        queue.flush();
        pending.extend(queue.offset);
        const id = pending.next();
        if (id === undefined) break;
        await this.nameFolder(id, this.nodes.get(id)!.dir!, queue, placed);
      }
    } finally {
      queue.close();
    }
  }

  private async nameFolder(
    id: string | null,
    dir: string,
    queue: LineWriter,
    placed: (n: TreeNode) => void,
  ): Promise<void> {
    const reserved = id === null ? TOP_RESERVED : RESERVED;
    const taken = id === null ? new Set([`summary.md`, `index${this.ext}`, 'media', DEEP]) : new Set<string>();
    const count = id === null ? this.top.count : (this.nodes.get(id)!.kids ?? 0);
    // What a name may take of PATH_CHARS once its folder's path, a suffix and its own ending are counted.
    const room = (folder: boolean) =>
      PATH_CHARS - (dir === '' ? 0 : dir.length + 1) - SUFFIX - (folder ? `/index${this.ext}`.length : this.ext.length);
    const place = (kid: string, name: string, under = dir) => {
      const n = this.nodes.get(kid)!;
      const rel = under === '' ? name : `${under}/${name}`;
      const done: TreeNode = this.isFolder(n)
        ? { ...n, dir: rel, path: `${rel}/index${this.ext}` }
        : { ...n, path: rel };
      this.nodes.set(kid, done);
      if (done.dir !== undefined) queue.write(kid);
      placed(done);
    };
    if (room(true) < 9) {
      for (const kid of this.children(id)) {
        const folder = this.isFolder(this.nodes.get(kid)!);
        place(kid, `${idTag(kid, 32)}${folder ? '' : this.ext}`, DEEP);
      }
      return;
    }
    const requests = function* (this: TreeIndex): Generator<NameRequest> {
      for (const kid of this.children(id)) {
        const n = this.nodes.get(kid)!;
        const folder = this.isFolder(n);
        let base = safeBaseName(n.slug, reserved);
        // A long path is shortened by cutting each name to the room its folder leaves (D14.2).
        if (base.length > room(folder)) base = safeBaseName(cutChars(base, room(folder) - 1), reserved);
        yield { id: kid, createdAt: n.createdAt, base, ext: folder ? '' : this.ext };
      }
    }.bind(this);
    if (count <= IN_MEMORY_FOLDER) {
      const names = uniqueNames([...requests()], taken);
      for (const kid of this.children(id)) place(kid, names.get(kid)!);
    } else await uniqueNamesOnDisk(requests(), taken, this.used, id ?? '', (kid, name) => place(kid, name));
  }

  /** The tree in depth-first order with each document's depth (0 at the top); a stack of readers, not recursion. */
  *walk(): Generator<{ node: TreeNode; depth: number }> {
    const stack: Generator<string>[] = [this.children(null, 4096)];
    while (stack.length > 0) {
      const next = stack[stack.length - 1]!.next();
      if (next.done === true) {
        stack.pop();
        continue;
      }
      const node = this.nodes.get(next.value)!;
      yield { node, depth: stack.length - 1 };
      if ((node.kids ?? 0) > 0) stack.push(this.children(node.id, 4096));
    }
  }

  /** Removes the index's files. Never throws. */
  close(): void {
    this.nodes.close();
    this.used.close();
    for (const w of [this.ids, this.kidsFile]) {
      try {
        w.close();
      } catch {
        // Closed already.
      }
    }
    rmSync(this.work, { recursive: true, force: true });
  }
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

/**
 * A path as SUMMARY.md's link destination: as it is, `%` and `#` percent-encoded, in `<…>` when it
 * holds white space or parentheses (CommonMark's form for them). Navigation plugins such as MkDocs'
 * literate-nav look the path up as written, without percent-decoding it (D14.1).
 */
export function summaryTarget(p: string): string {
  const target = p.replace(/[%#]/g, (c) => encodeURIComponent(c));
  return /[\s()]/.test(target) ? `<${target}>` : target;
}

/** Markdown link text: brackets and backslashes escaped, line breaks as spaces. */
const linkText = (s: string) => s.replace(/[\\[\]]/g, (c) => `\\${c}`).replace(/\s+/g, ' ');

/** `SUMMARY.md` (the mdBook and GitBook convention), line by line: every document, nested by the tree, in sibling order. */
export function* summaryLines(tree: TreeIndex, bookName: string): Generator<string> {
  yield `# ${linkText(bookName)}\n\n`;
  for (const { node: n, depth } of tree.walk())
    yield `${'  '.repeat(depth)}- [${linkText(n.title || n.slug)}](${summaryTarget(n.path!)})\n`;
}
