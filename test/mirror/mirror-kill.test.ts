/**
 * `kb-export mirror` killed (SIGKILL) while it writes pages, then run again: the second run
 * completes the tree, which then equals a fresh full mirror of the same snapshot byte for byte,
 * with no temporary file left. In the same book, the pathological pages of issue 42 (8 MB of media
 * tags, markup nested thousands deep) keep their HTML inside the .md, each with a line on standard
 * error, and the run stays within its budget.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { treeOf } from '../helpers/mirror-files.js';
import { CLI } from '../helpers/paths.js';

const PAGES = 400;
const server = await startServer(t);
const sql = server.db.sql;
await seed(sql, simpleSeed([]));
// Pages of some 20 KB of tables and code, so that converting them takes seconds, not milliseconds.
await sql.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, parent_id, content_html)
  SELECT 'p' || i, 'b-u1', 'page-' || i, 'Page ' || i, 'document', lpad(i::text, 5, '0'), 1,
    CASE WHEN i % 10 = 0 THEN NULL ELSE 'p' || (i - i % 10) END,
    (SELECT string_agg('<h2>Part ' || j || '</h2><p>Text of ' || i || '.' || j || '</p><table><tr><th>a</th><th>b</th></tr><tr><td>' || j || '</td><td>x</td></tr></table><pre><code class="language-sql">SELECT ' || j || ';</code></pre>', '')
     FROM generate_series(1, 60) j)
  FROM generate_series(1, ${PAGES}) i`);
await sql.unsafe(`
  INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html) VALUES
  ('huge', 'b-u1', 'huge', 'Huge', 'document', 'z1', 1, repeat('<img src="uploads/pic.png" alt="p">', 240000)),
  ('deep', 'b-u1', 'deep', 'Deep', 'document', 'z2', 1, repeat('<div>', 5000) || 'bottom' || repeat('</div>', 5000))`);

const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-kill-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const out = path.join(dir, 'kb');
const args = (to: string) => ['mirror', '--server', server.url, '--book', 'kb', '--out', to];

const pagesIn = (d: string) =>
  existsSync(d) ? readdirSync(d, { recursive: true }).filter((f) => String(f).endsWith('.md')).length : 0;

t.test('killed while writing pages, the next run completes the tree', async (t) => {
  const child = spawn(process.execPath, [CLI, ...args(out)], {
    env: { ...process.env, KB_EXPORT_API_KEY: 'kbx_u1' },
    stdio: 'ignore',
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const until = Date.now() + 120_000;
  while (pagesIn(out) < 40 && Date.now() < until && child.exitCode === null) await sleep(20);
  t.ok(existsSync(path.join(out, '.kb-export/index.next.ndjson')), 'the run noted its paths before writing');
  child.kill('SIGKILL');
  await exited;
  const written = pagesIn(out);
  t.ok(written >= 40 && written < PAGES, `killed after ${written} of ${PAGES + 2} pages`);
  t.notOk(existsSync(path.join(out, '.kb-export/index.ndjson')), 'no index yet: the run did not finish');

  await sql`UPDATE documents SET slug = 'renamed' WHERE id = 'p10'`;
  const started = Date.now();
  const r = await runCli(args(out));
  t.equal(r.code, 0, r.stderr);
  t.ok(Date.now() - started < 180_000, 'within its budget');
  t.match(r.stderr, /huge\.md: kept as HTML, \d+ characters of HTML, over the budget of 2000000/);
  t.match(r.stderr, /deep\.md: kept as HTML, markup nested more than 256 levels deep/);
  t.same(readdirSync(path.join(out, '.kb-export/tmp')), [], 'no temporary file left');
  t.notOk(existsSync(path.join(out, 'page-10')), 'the renamed folder left no trace');
  const huge = readFileSync(path.join(out, 'huge.md'), 'utf8');
  t.match(huge, /^---\nid: "huge"[\s\S]*\n---\n\n<!-- kb-export mirror: kept as HTML \(/);
  t.match(huge, /<img src="http:\/\/127\.0\.0\.1:\d+\/media\/uploads\/pic\.png" alt="p" \/>/);

  const fresh = path.join(dir, 'fresh');
  const f = await runCli(args(fresh));
  t.equal(f.code, 0, f.stderr);
  t.same(treeOf(out), treeOf(fresh), 'equal to a fresh full mirror, byte for byte');
});
