/**
 * `kb-export mirror` on a real documentation corpus, the PostgreSQL manual (Debian's
 * postgresql-doc-15) loaded with `kb-export import-html`: every page is written, none takes the
 * fallback, every page's Markdown parses back (remark) with words close to the document's
 * contentStr, every relative link between pages resolves (the manual's `other.html` links lead to
 * `other.md`), and a second run writes nothing. Skipped, saying why, where the manual is not
 * installed.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { seed, simpleSeed, startServer } from '../helpers/app.js';
import { runCli } from '../helpers/backup-cli.js';
import { markdownText, relativeTargets, treeOf } from '../helpers/mirror-files.js';

const MANUAL = '/usr/share/doc/postgresql-doc-15/html';

/** Words (letters and digits) of a text, lower case, with their counts. */
function words(text: string): Map<string, number> {
  const m = new Map<string, number>();
  for (const w of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) m.set(w, (m.get(w) ?? 0) + 1);
  return m;
}

/** The share of words two texts have in common, counted with repeats, over the larger count (1: the same words). */
function overlap(a: string, b: string): number {
  const x = words(a);
  const y = words(b);
  let common = 0;
  let nx = 0;
  let ny = 0;
  for (const [w, n] of x) {
    nx += n;
    common += Math.min(n, y.get(w) ?? 0);
  }
  for (const n of y.values()) ny += n;
  return Math.max(nx, ny) === 0 ? 1 : common / Math.max(nx, ny);
}

t.test(
  'the PostgreSQL manual mirrors whole, and its Markdown reads back as its text',
  { skip: !existsSync(MANUAL) && `${MANUAL} is missing (Debian package postgresql-doc-15)` },
  async (t) => {
    const server = await startServer(t);
    await seed(server.db.sql, simpleSeed([], { slug: 'unused' }));
    const imported = await runCli(['import-html', MANUAL, '--owner', 'u1', '--slug', 'manual'], {
      DATABASE_URL: server.db.url,
    });
    t.equal(imported.code, 0, imported.stderr);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-mirror-manual-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const out = path.join(dir, 'manual');
    const args = ['mirror', '--server', server.url, '--book', 'manual', '--out', out];
    const r = await runCli(args);
    t.equal(r.code, 0, r.stderr);
    t.notMatch(r.stderr, /kept as HTML/, 'no page needed the fallback');

    const docs = readFileSync(path.join(out, '.kb-export/export.ndjson'), 'utf8')
      .split('\n')
      .slice(1)
      .filter((l) => l.startsWith('{"id"'))
      .map((l) => JSON.parse(l) as { id: string; type: string; contentStr: string | null });
    const index = new Map(
      readFileSync(path.join(out, '.kb-export/index.ndjson'), 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { id: string; path: string })
        .map((e) => [e.id, e.path]),
    );
    t.ok(docs.length > 1000, `${docs.length} documents`);
    t.equal(index.size, docs.length, 'every document has its page');
    const scores: number[] = [];
    for (const d of docs) {
      if (d.type !== 'document' || d.contentStr === null) continue;
      const page = readFileSync(path.join(out, index.get(d.id)!), 'utf8');
      const body = page.replace(/^---\n[\s\S]*?\n---\n/, '');
      scores.push(overlap(markdownText(body), d.contentStr));
    }
    scores.sort((a, b) => a - b);
    const median = scores[Math.floor(scores.length / 2)]!;
    const low = scores[Math.floor(scores.length / 100)]!;
    t.ok(median >= 0.99, `median word overlap with contentStr ${median.toFixed(3)}`);
    t.ok(low >= 0.95, `1st percentile ${low.toFixed(3)}`);

    let links = 0;
    const broken: string[] = [];
    for (const [rel, bytes] of treeOf(out)) {
      for (const target of relativeTargets(bytes.toString())) {
        links++;
        if (!existsSync(path.join(out, path.dirname(rel), decodeURIComponent(target))))
          broken.push(`${rel} → ${target}`);
      }
    }
    t.ok(links > 10_000, `${links} relative links and images`);
    t.same(broken, [], 'every relative link and image resolves to a file of the mirror');

    const mtimes = new Map([...treeOf(out).keys()].map((p) => [p, statSync(path.join(out, p)).mtimeMs]));
    const again = await runCli(args);
    t.equal(again.code, 0, again.stderr);
    t.match(again.stderr, /0 added, 0 changed, 0 moved, 0 deleted/);
    t.ok(
      [...mtimes].every(([p, m]) => statSync(path.join(out, p)).mtimeMs === m),
      'a second run writes nothing',
    );
  },
);
