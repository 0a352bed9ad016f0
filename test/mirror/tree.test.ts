/** The mirror's layout (src/mirror/tree.ts): folders for categories and parents, D1 order, orphans and cycles at the top. */
import t from 'tap';
import { layout, relativeLink, summaryMarkdown, type NodeMeta } from '../../src/mirror/tree.js';

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
const nodes = (...list: NodeMeta[]) => new Map(list.map((n) => [n.id, n]));

t.test('categories and documents with children are folders; orphans and cycles go to the top', async (t) => {
  const tree = layout(
    nodes(
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
    ),
    '.md',
  );
  t.same(Object.fromEntries(tree.paths), {
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
  });
  t.same(tree.children.get(null), ['cat', 'p', 'orphan', 'x', 'y', 'summary'], 'siblings in orderKey order');
  t.equal(relativeLink('a/b/c.md', 'media/x.png'), '../../media/x.png');
  const small = nodes(node('cat', 'b', { title: 'A [b]' }), node('leaf', 'a', { parentId: 'cat' }));
  t.same(summaryMarkdown(layout(small, '.md'), small, 'Book').split('\n'), [
    '# Book',
    '',
    '- [A \\[b\\]](cat/index.md)',
    '  - [LEAF](cat/leaf.md)',
    '',
  ]);
});
