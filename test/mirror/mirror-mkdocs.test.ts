/**
 * The README's MkDocs example, run: `kb-export mirror --media` (a child process) of a small book
 * (nested categories, a document with children, a slug with a space and accents, links between
 * documents, images saved into media/), then `mkdocs build --strict` with the README's
 * mkdocs.yml and the literate-nav plugin (Debian's mkdocs and mkdocs-literate-nav): no warning,
 * each page built under its title, the navigation in the tree's order, links and images leading
 * to files of the site. Skipped, saying why, where mkdocs or the plugin is not installed.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { startFront } from '../helpers/media-front.js';

/** The mkdocs.yml of the README's example. */
const MKDOCS_YML = 'site_name: Handbook\ndocs_dir: handbook\nuse_directory_urls: false\nplugins: [literate-nav]\n';

function missing(): string | false {
  const which = spawnSync('which', ['mkdocs'], { encoding: 'utf8' });
  if (which.status !== 0) return 'mkdocs is not installed (Debian package mkdocs)';
  // The plugin must be importable by the Python that runs mkdocs (its script's #! line).
  const python = readFileSync(which.stdout.trim(), 'utf8')
    .split('\n')[0]!
    .replace(/^#!\s*/, '')
    .split(' ')[0]!;
  if (spawnSync(python, ['-c', 'import mkdocs_literate_nav']).status !== 0)
    return 'the literate-nav plugin is not installed (Debian package mkdocs-literate-nav)';
  return false;
}

t.test('the README’s MkDocs example builds with --strict', { skip: missing() }, async (t) => {
  const server = await startServer(t);
  await seed(
    server.db.sql,
    simpleSeed([
      doc('c1', 'a1', { type: 'category', slug: 'guide', name: 'Guide' }),
      doc('d1', 'a2', {
        parentId: 'c1',
        slug: 'intro',
        name: 'Intro',
        contentHtml:
          '<p>See <a href="héllo wörld">the greeting</a> and <a href="child.html#part">the child</a>.</p><p><img src="uploads/p.png" alt="p"></p><table><tr><th>a</th></tr><tr><td>1</td></tr></table>',
      }),
      doc('c2', 'a3', { type: 'category', parentId: 'c1', slug: 'deep', name: 'Deep' }),
      doc('d2', 'a4', { parentId: 'c2', slug: 'page', name: 'Page', contentHtml: '<p>deep page</p>' }),
      doc('p1', 'b1', { slug: 'parent', name: 'Parent', contentHtml: '<p>parent</p>' }),
      doc('p2', 'b2', { parentId: 'p1', slug: 'child', name: 'Child', contentHtml: '<h2 id="part">Part</h2>' }),
      doc('h1', 'b3', { slug: 'héllo wörld', name: 'Héllo', contentHtml: '<p><a href="intro">back</a></p>' }),
    ]),
  );
  const front = await startFront(t, server.url, (_req, res) => {
    res.writeHead(200, { 'content-type': 'image/png', 'content-length': 3 }).end('png');
  });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-mkdocs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const r = await runCli([
    'mirror',
    '--server',
    front.base,
    '--book',
    'kb',
    '--out',
    path.join(dir, 'handbook'),
    '--media',
  ]);
  t.equal(r.code, 0, r.stderr);
  writeFileSync(path.join(dir, 'mkdocs.yml'), MKDOCS_YML);
  const build = spawnSync('mkdocs', ['build', '--strict'], { cwd: dir, encoding: 'utf8' });
  t.equal(build.status, 0, build.stderr);
  t.notMatch(build.stderr, /WARNING/, 'no warning');
  const site = (p: string) => path.join(dir, 'site', p);
  const intro = readFileSync(site('guide/intro.html'), 'utf8');
  t.match(intro, /<title>Intro - Handbook<\/title>/, 'the frontmatter title names the page');
  t.match(
    intro,
    /href="\.\.\/h%C3%A9llo%20w%C3%B6rld-?\.html"|href="\.\.\/héllo wörld\.html"/,
    'a link to another page',
  );
  t.match(intro, /href="\.\.\/parent\/child\.html#part"/, 'a link with its fragment');
  t.match(intro, /<img alt="p" src="\.\.\/media\/uploads\/p\.png"/, 'an image saved by --media');
  t.ok(existsSync(site('media/uploads/p.png')), 'the image is in the site');
  const nav = [...intro.matchAll(/<a href="[^"]*" class="(?:nav-link|dropdown-item)[^"]*"[^>]*>([^<]+)</g)].map((m) =>
    m[1]!.trim(),
  );
  const order = ['Intro', 'Page', 'Parent', 'Child', 'Héllo'].map((title) => nav.indexOf(title));
  t.ok(
    order.every((i, k) => i >= 0 && (k === 0 || i > order[k - 1]!)),
    `the navigation in the tree's order: ${nav.join(', ')}`,
  );
  t.ok(
    execFileSync('find', [site(''), '-name', '*.html'])
      .toString()
      .split('\n').length > 7,
    'a page for each document',
  );
});
