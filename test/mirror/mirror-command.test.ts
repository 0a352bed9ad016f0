/**
 * `kb-export mirror` as a child process against the real server and PostgreSQL (issue 42, D12):
 * the first run lays the tree out (nested categories, a document with children as a folder, slug
 * collisions that ignore case, Windows device names, unicode and forbidden characters, a reserved
 * `index`), with frontmatter and SUMMARY.md, Markdown that parses back with contentStr's text;
 * a later run after a move, a rename, a deletion of a category with children and a type change
 * changes exactly those files, leaves every other file's mtime, and equals a fresh full mirror of
 * the same snapshot byte for byte; `--git` commits each run with what changed; a folder that is not
 * a mirror is refused with nothing written; an expired token (410) means a full read that still
 * writes only what differs.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { parse as parseYaml } from 'yaml';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { idTag } from '../../src/mirror/names.js';
import { markdownText, treeOf } from '../helpers/mirror-files.js';

const at = (day: number) => `2024-03-${String(day).padStart(2, '0')}T10:00:00.000Z`;

const server = await startServer(t);
const sql = server.db.sql;
await seed(
  sql,
  simpleSeed([
    doc('c1', 'a1', { type: 'category', slug: 'guide', name: 'Guide', createdAt: at(1) }),
    doc('d1', 'a2', {
      parentId: 'c1',
      slug: 'intro',
      name: 'Intro',
      tags: ['start', 'ü'],
      description: 'How to begin',
      createdAt: at(2),
      contentStr: 'Hello world. A B 1 2 let x = 1;',
      contentHtml:
        '<p>Hello <strong>world</strong>.</p><table><thead><tr><th>A</th><th>B</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table><pre><code class="language-js">let x = 1;</code></pre>',
    }),
    doc('c2', 'a3', { type: 'category', parentId: 'c1', slug: 'deep', name: 'Deep', createdAt: at(3) }),
    doc('d2', 'a4', { parentId: 'c2', slug: 'page', name: 'Page', contentHtml: '<p>deep page</p>', createdAt: at(4) }),
    doc('d3', 'a5', { slug: 'notes', name: 'Notes', contentHtml: '<p>first</p>', createdAt: at(5) }),
    doc('d4', 'a6', { slug: 'NOTES', name: 'NOTES too', contentHtml: '<p>second</p>', createdAt: at(6) }),
    doc('d5', 'a7', { slug: 'CON', name: 'Console', createdAt: at(7) }),
    doc('d6', 'a8', { slug: 'héllo wörld?', name: 'Héllo', createdAt: at(8) }),
    doc('d7', 'a9', { slug: 'trailing. ', name: 'Trailing', createdAt: at(9) }),
    doc('p1', 'b1', { slug: 'parent-doc', name: 'Parent', contentHtml: '<p>parent</p>', createdAt: at(10) }),
    doc('p2', 'b2', { parentId: 'p1', slug: 'child', name: 'Child', createdAt: at(11) }),
    doc('x1', 'b3', { slug: 'index', name: 'Index page', createdAt: at(12) }),
    doc('c3', 'b4', { type: 'category', slug: 'old', name: 'Old', createdAt: at(13) }),
    doc('o1', 'b5', { parentId: 'c3', slug: 'gone', name: 'Gone', createdAt: at(14) }),
  ]),
);
const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const mirror = (out: string, extra: string[] = []) =>
  runCli(['mirror', '--server', server.url, '--book', 'kb', '--out', out, ...extra]);

const out = path.join(dir, 'kb');

t.test('the first run lays out the tree, with frontmatter and SUMMARY.md', async (t) => {
  const r = await mirror(out, ['--git']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /mirror: 14 added, 0 changed, 0 moved, 0 deleted/);
  const tree = treeOf(out);
  t.same(
    [...tree.keys()],
    [
      'CON_.md',
      `NOTES-${idTag('d4')}.md`,
      'SUMMARY.md',
      'guide/deep/index.md',
      'guide/deep/page.md',
      'guide/index.md',
      'guide/intro.md',
      'héllo wörld-.md',
      'index_.md',
      'notes.md',
      'old/gone.md',
      'old/index.md',
      'parent-doc/child.md',
      'parent-doc/index.md',
      'trailing.md',
    ].sort(),
    'categories and a document with children as folders; the later of a case collision suffixed by its id; device, reserved and forbidden names made safe',
  );
  const intro = tree.get('guide/intro.md')!.toString();
  const [, front, body] = /^---\n([\s\S]*?)\n---\n\n([\s\S]*)$/.exec(intro)!;
  const meta = parseYaml(front!) as Record<string, unknown>;
  t.same(Object.keys(meta), [
    'id',
    'title',
    'slug',
    'type',
    'parentId',
    'orderKey',
    'tags',
    'description',
    'emoji',
    'cover',
    'createdAt',
    'updatedAt',
  ]);
  t.match(meta, {
    id: 'd1',
    title: 'Intro',
    slug: 'intro',
    type: 'document',
    parentId: 'c1',
    orderKey: 'a2',
    tags: ['start', 'ü'],
    description: 'How to begin',
    emoji: null,
    cover: null,
    createdAt: at(2),
  });
  t.match(body, /\| A \| B \|/, 'a GFM table');
  t.match(body, /```js\nlet x = 1;\n```/, 'a fenced code block with its language');
  t.equal(markdownText(body!), 'Hello world. A B 1 2 let x = 1;', "the Markdown's text is contentStr's");
  const summary = tree.get('SUMMARY.md')!.toString();
  t.match(
    summary,
    /- \[Guide\]\(guide\/index\.md\)\n {2}- \[Intro\]\(guide\/intro\.md\)\n {2}- \[Deep\]\(guide\/deep\/index\.md\)\n {4}- \[Page\]\(guide\/deep\/page\.md\)/,
  );
  t.match(summary, /\[Héllo\]\(<héllo wörld-\.md>\)/, 'a path with a space, as CommonMark writes it');
  const log = execFileSync('git', ['log', '--format=%s'], { cwd: out }).toString();
  t.equal(log, 'kb-export mirror: 14 added, 0 changed, 0 moved, 0 deleted\n');
  t.equal(execFileSync('git', ['status', '--porcelain'], { cwd: out }).toString(), '', '.kb-export/ is not committed');
});

t.test('a later run changes exactly what changed and equals a fresh mirror', async (t) => {
  const before = treeOf(out);
  const mtimes = new Map([...before.keys()].map((p) => [p, statSync(path.join(out, p)).mtimeMs]));
  await sql`UPDATE documents SET parent_id = NULL WHERE id = 'd1'`;
  await sql`UPDATE documents SET slug = 'page-two', name = 'Page two' WHERE id = 'd2'`;
  await sql`DELETE FROM documents WHERE id IN ('c3', 'o1')`;
  await sql`UPDATE documents SET type = 'category' WHERE id = 'd3'`;
  await sql`UPDATE documents SET content_html = '<p>now with text</p>' WHERE id = 'd5'`;
  await sql`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, parent_id, content_html)
    VALUES ('n1', 'b-u1', 'new', 'New', 'document', 'a45', 1, 'c2', '<p>new</p>')`;
  const r = await mirror(out, ['--git']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /mirror: 1 added, 1 changed, 4 moved, 2 deleted/);
  const after = treeOf(out);
  const touched = [...after.keys()].filter((p) => statSync(path.join(out, p)).mtimeMs !== mtimes.get(p));
  t.same(
    touched.sort(),
    [
      'CON_.md',
      'NOTES.md',
      'SUMMARY.md',
      'guide/deep/new.md',
      'guide/deep/page-two.md',
      'intro.md',
      'notes/index.md',
    ].sort(),
    'only the changed pages and SUMMARY.md were written (NOTES.md: its collision with notes.md is gone)',
  );
  t.notOk(after.has('old/index.md') || after.has('old/gone.md'), 'the deleted category and its child went');
  t.notOk(readdirSync(out).includes('old'), 'with the folder they left empty');
  t.notOk(
    after.has('guide/intro.md') || after.has('guide/deep/page.md') || after.has('notes.md'),
    'moved files left their old paths',
  );
  const fresh = path.join(dir, 'fresh');
  const f = await mirror(fresh);
  t.equal(f.code, 0, f.stderr);
  t.same(treeOf(fresh), after, 'a fresh full mirror of the same snapshot holds the same files, byte for byte');
  t.equal(
    execFileSync('git', ['log', '-1', '--format=%s'], { cwd: out }).toString(),
    'kb-export mirror: 1 added, 1 changed, 4 moved, 2 deleted\n',
  );
  const again = await mirror(out, ['--git']);
  t.equal(again.code, 0, again.stderr);
  t.match(again.stderr, /0 added, 0 changed, 0 moved, 0 deleted.*git: nothing to commit/);
});

t.test('an expired token (410) reads everything again and still writes only what differs', async (t) => {
  const before = treeOf(out);
  const mtimes = new Map([...before.keys()].map((p) => [p, statSync(path.join(out, p)).mtimeMs]));
  await sql`SELECT kbx_expire_change_tokens()`;
  await sql`DELETE FROM documents WHERE id = 'd7'`;
  const r = await mirror(out);
  t.equal(r.code, 0, r.stderr);
  t.match(
    r.stderr,
    /the kept change token expired \(410 CHANGE_TOKEN_EXPIRED\): the whole knowledge base is read again/,
  );
  t.match(r.stderr, /mirror: 0 added, 0 changed, 0 moved, 1 deleted/);
  const after = treeOf(out);
  t.notOk(after.has('trailing.md'));
  const touched = [...after.keys()].filter((p) => statSync(path.join(out, p)).mtimeMs !== mtimes.get(p));
  t.same(touched, ['SUMMARY.md'], 'every other file kept its mtime');
});

t.test('a folder that is not a mirror, or mirrors another format, is refused untouched', async (t) => {
  const other = path.join(dir, 'other');
  mkdirSync(other);
  writeFileSync(path.join(other, 'mine.txt'), 'keep');
  const r = await mirror(other);
  t.equal(r.code, 2);
  t.match(r.stderr, /holds files but is not a mirror/);
  t.same(readdirSync(other), ['mine.txt']);
  const nowhere = path.join(dir, 'nowhere');
  const noKey = await runCli(['mirror', '--server', server.url, '--book', 'kb', '--out', nowhere], {
    KB_EXPORT_API_KEY: '',
  });
  t.equal(noKey.code, 2);
  t.match(noKey.stderr, /no API key/);
  const noBook = await runCli(['mirror', '--server', server.url, '--book', 'nope', '--out', nowhere]);
  t.equal(noBook.code, 3);
  t.match(noBook.stderr, /404 BOOK_NOT_FOUND/);
  t.notOk(existsSync(nowhere), 'a first run that got no export leaves nothing behind');
  const badServer = await mirror(other.replace('other', 'bad'), ['--server', 'ftp://x']);
  t.equal(badServer.code, 2);
  const html = await mirror(out, ['--format', 'html']);
  t.equal(html.code, 2);
  t.match(html.stderr, /mirrors the book "kb" as markdown/);
});
