/**
 * The HTML format of `kb-export mirror` in headless Chromium (Debian's `chromium` package), read
 * from the files as a person offline would: the index renders with a link to the deep page, a page
 * three folders deep renders with its title and text (its script removed, so it could not empty
 * the page) and its image pointing into DIR/media/, and Chromium takes a screenshot of it.
 * Skipped, saying why, where Chromium is not installed (a fresh machine: `apt-get install chromium`).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { doc, seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { startFront } from '../helpers/media-front.js';

const CHROMIUM = '/usr/bin/chromium';
const run = promisify(execFile);

// A 2×2 red PNG.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP8z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==',
  'base64',
);

/** Chromium's DOM of `file` after load (scripts would have run: there are none). */
async function dom(file: string, profile: string): Promise<string> {
  const { stdout } = await run(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      `--user-data-dir=${profile}`,
      '--allow-file-access-from-files',
      '--dump-dom',
      pathToFileURL(file).href,
    ],
    { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
  );
  return stdout;
}

t.test(
  'the index and a deep page render in headless Chromium',
  { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is missing (Debian package chromium)` },
  async (t) => {
    const server = await startServer(t);
    await seed(
      server.db.sql,
      simpleSeed([
        doc('c1', 'a1', { type: 'category', slug: 'one', name: 'One' }),
        doc('c2', 'a2', { type: 'category', slug: 'two', name: 'Two', parentId: 'c1' }),
        doc('c3', 'a3', { type: 'category', slug: 'three', name: 'Three', parentId: 'c2' }),
        doc('d1', 'a4', {
          parentId: 'c3',
          slug: 'deep',
          name: 'Deep page',
          contentHtml:
            '<p id="text">Deep text</p><img id="pic" src="uploads/red.png" alt="red"><script>document.body.remove()</script>',
        }),
      ]),
    );
    const front = await startFront(t, server.url, (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': PNG.length }).end(PNG);
    });
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-chromium-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const out = path.join(dir, 'kb');
    const r = await runCli([
      'mirror',
      '--server',
      front.base,
      '--book',
      'kb',
      '--out',
      out,
      '--format',
      'html',
      '--media',
    ]);
    t.equal(r.code, 0, r.stderr);
    const profile = path.join(dir, 'profile');

    const index = await dom(path.join(out, 'index.html'), profile);
    t.match(index, /<h1>KB<\/h1>/, 'the index renders');
    t.match(index, '<a href="one/two/three/deep.html">Deep page</a>', 'with a link to the deep page');

    const deepFile = path.join(out, 'one/two/three/deep.html');
    const deep = await dom(deepFile, profile);
    t.match(deep, /<h1>Deep page<\/h1>/, 'the deep page renders');
    t.match(deep, '<p id="text">Deep text</p>', 'with its text: no script removed the body');
    t.match(deep, '<img id="pic" src="../../../media/uploads/red.png" alt="red">', 'and its image, from media/');
    t.ok(existsSync(path.join(out, 'media/uploads/red.png')));

    const shot = path.join(dir, 'deep.png');
    await run(
      CHROMIUM,
      [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        `--user-data-dir=${profile}`,
        `--screenshot=${shot}`,
        '--window-size=800,600',
        pathToFileURL(deepFile).href,
      ],
      { timeout: 60_000 },
    );
    t.ok(statSync(shot).size > 1000, 'a screenshot of it');
  },
);
