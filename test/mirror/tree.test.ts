/**
 * The mirror's layout (src/mirror/tree.ts) on its index on disk: folders for categories and
 * parents, D1 order, orphans and cycles at the top; a folder too large to name in memory named
 * on disk as uniqueNames names a small one (folder-names.ts); the DiskTable under it all.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { DiskTable } from '../../src/mirror/disk-table.js';
import { uniqueNamesOnDisk } from '../../src/mirror/folder-names.js';
import { idTag, uniqueNames, type NameRequest } from '../../src/mirror/names.js';
import {
  PATH_CHARS,
  relativeLink,
  summaryLines,
  summaryTarget,
  TreeIndex,
  type NodeMeta,
} from '../../src/mirror/tree.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-tree-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
let made = 0;

const node = (id: string, orderKey: string, extra: Partial<NodeMeta> = {}): NodeMeta => ({
  id,
  parentId: null,
  type: 'document',
  slug: id,
  title: id.toUpperCase(),
  orderKey,
  createdAt: '2024',
  ...extra,
});

async function laidOut(list: NodeMeta[], ext = '.md'): Promise<TreeIndex> {
  const tree = new TreeIndex(path.join(dir, `tree-${made++}`), ext);
  for (const n of list) tree.add(n, 'digest');
  await tree.layOut();
  return tree;
}

t.test('categories and documents with children are folders; orphans and cycles go to the top', async (t) => {
  const tree = await laidOut([
    node('cat', 'b', { type: 'category' }),
    node('leaf', 'a', { parentId: 'cat' }),
    node('p', 'c'),
    node('kid', 'a', { parentId: 'p' }),
    node('orphan', 'd', { parentId: 'missing' }),
    node('x', 'e', { parentId: 'y' }),
    node('y', 'f', { parentId: 'x' }),
    node('under', 'a', { parentId: 'x' }),
    node('summary', 'g'),
    node('index', 'h', { parentId: 'cat' }),
    node('r1', 'i', { parentId: 'r3' }),
    node('r2', 'j', { parentId: 'r1' }),
    node('r3', 'k', { parentId: 'r2' }),
    node('tail', 'l', { parentId: 'r2' }),
  ]);
  t.teardown(() => tree.close());
  t.same(Object.fromEntries([...tree.allIds()].map((id) => [id, tree.node(id)!.path])), {
    cat: 'cat/index.md',
    leaf: 'cat/leaf.md',
    index: 'cat/index_.md',
    p: 'p/index.md',
    kid: 'p/kid.md',
    orphan: 'orphan.md',
    x: 'x/index.md',
    y: 'y.md',
    under: 'x/under.md',
    summary: 'summary_.md',
    r1: 'r1.md',
    r2: 'r2/index.md',
    r3: 'r3.md',
    tail: 'r2/tail.md',
  });
  t.same(
    [...tree.children(null)],
    ['cat', 'p', 'orphan', 'x', 'y', 'summary', 'r1', 'r2', 'r3'],
    'siblings in orderKey order',
  );
  t.equal(relativeLink('a/b/c.md', 'media/x.png'), '../../media/x.png');
  t.equal(
    summaryTarget('a b/c#d%(1).md'),
    '<a b/c%23d%25(1).md>',
    'SUMMARY.md keeps a path as written but for % and #',
  );
  t.equal(summaryTarget('é/x.md'), 'é/x.md');
  const small = await laidOut([node('cat', 'b', { title: 'A [b]' }), node('leaf', 'a', { parentId: 'cat' })]);
  t.teardown(() => small.close());
  t.same([...summaryLines(small, 'Book')].join('').split('\n'), [
    '# Book',
    '',
    '- [A \\[b\\]](cat/index.md)',
    '  - [LEAF](cat/leaf.md)',
    '',
  ]);
});

t.test('the same paths whatever order the documents arrive in', async (t) => {
  const list = Array.from({ length: 300 }, (_, i) =>
    node(`n${i}`, `k${(i * 37) % 50}`, {
      parentId: i < 10 ? null : `n${(i * 7) % 10}`,
      slug: ['same', 'Same', `s${i % 20}`][i % 3]!,
      createdAt: String(i % 5),
    }),
  );
  const a = await laidOut(list);
  const b = await laidOut([...list].reverse());
  t.teardown(() => (a.close(), b.close()));
  const paths = (tr: TreeIndex) => [...tr.allIds()].map((id) => `${id} ${tr.node(id)!.path}`).sort();
  t.same(paths(a), paths(b));
  t.equal(new Set(paths(a).map((p) => p.split(' ')[1]!.toLowerCase())).size, 300, 'every path unique ignoring case');
});

t.test('a folder too large for memory gets the names uniqueNames gives', async (t) => {
  const used = new DiskTable<1>(path.join(dir, 'used'));
  t.teardown(() => used.close());
  const requests: NameRequest[] = Array.from({ length: 6000 }, (_, i) => ({
    id: `id${(i * 7919) % 6000}`,
    createdAt: String(i % 3),
    base: i === 5 ? `a-${idTag('id0')}` : ['a', 'A', 'b', `c${i}`][i % 4]!,
    ext: i % 5 === 0 ? '' : '.md',
  }));
  const taken = new Set(['b.md']);
  const expected = uniqueNames(requests, taken);
  const got = new Map<string, string>();
  await uniqueNamesOnDisk(requests, taken, used, 'f', (id, name) => got.set(id, name));
  t.same(got, expected);
});

t.test('a DiskTable keeps, replaces and finds values past many doublings', async (t) => {
  const table = new DiskTable<{ v: number; s: string }>(path.join(dir, 'table'));
  t.teardown(() => table.close());
  for (let i = 0; i < 40_000; i++) table.set(`k${i}`, { v: i, s: 'é'.repeat(i % 300) });
  for (let i = 0; i < 40_000; i += 3) table.set(`k${i}`, { v: -i, s: '' });
  t.equal(table.size, 40_000);
  let bad = 0;
  for (let i = 0; i < 40_000; i++) {
    const v = table.get(`k${i}`);
    if (v === undefined || v.v !== (i % 3 === 0 ? -i : i) || v.s.length !== (i % 3 === 0 ? 0 : i % 300)) bad++;
  }
  t.equal(bad, 0, 'every value as last set');
  t.notOk(table.has('k40000'));
});

t.test('every path fits in PATH_CHARS: long names cut, folders too deep for a name under _deep/', async (t) => {
  const long = (c: string) => c.repeat(110);
  const list = [
    node('a', 'a', { type: 'category', slug: long('a') }),
    node('b', 'a', { type: 'category', parentId: 'a', slug: 'b'.repeat(60) }),
    node('c', 'a', { parentId: 'b', slug: long('c') }),
    node('c2', 'b', { parentId: 'b', slug: long('c') }),
    node('e', 'c', { parentId: 'b', slug: `${'é'.repeat(20)}${'😀'.repeat(60)}` }),
    node('top', 'b', { slug: long('t') }),
    node('_deep', 'c', { slug: '_deep' }),
    // A chain 150 deep of one-letter names: past some depth no name fits any more.
    ...Array.from({ length: 150 }, (_, i) => node(`k${i}`, 'z', { parentId: i === 0 ? null : `k${i - 1}`, slug: 'k' })),
  ];
  const tree = await laidOut(list);
  t.teardown(() => tree.close());
  const paths = [...tree.allIds()].map((id) => tree.node(id)!.path!);
  t.ok(
    paths.every((p) => p.length <= PATH_CHARS),
    `the longest path has ${Math.max(...paths.map((p) => p.length))} characters`,
  );
  t.equal(new Set(paths.map((p) => p.toLowerCase())).size, paths.length, 'still unique');
  t.equal(tree.node('top')!.path, `${long('t')}.md`, 'a name with room is left whole');
  const c = tree.node('c')!.path!;
  t.ok(c.startsWith(`${tree.node('b')!.dir}/ccc`) && c.length <= PATH_CHARS && c.length > 200, c);
  t.equal(
    tree.node('c2')!.path,
    `${c.slice(0, -3)}-${idTag('c2')}.md`,
    'a cut name that collides takes the suffix it has room for',
  );
  t.notMatch(tree.node('e')!.path!, /[\ud800-\udbff](\.md)?$/, 'never cut inside a surrogate pair');
  t.equal(tree.node('_deep')!.path, '_deep_.md', '_deep is the mirror’s own at the top');
  const deep = paths.filter((p) => p.startsWith('_deep/'));
  t.ok(deep.length > 0, `${deep.length} pages under _deep/`);
  t.match(
    tree.node('k149')!.path!,
    /^(_deep\/[0-9a-f]{32}\/)?(k\/)*k\.md$/,
    'the chain goes on below its _deep/ folder',
  );
  const again = await laidOut([...list].reverse());
  t.teardown(() => again.close());
  t.same(
    [...again.allIds()].map((id) => again.node(id)!.path).sort(),
    [...paths].sort(),
    'the same paths in any order',
  );
});
