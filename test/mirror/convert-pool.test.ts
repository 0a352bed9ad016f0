/**
 * The converter's budget (src/mirror/convert-pool.ts, markdown.ts): a page over the size budget is
 * refused at once, markup nested too deep is refused by the worker, a page over the time budget
 * ends its worker and the next page still converts; Markdown keeps tables, code and images.
 */
import t from 'tap';
import { ConvertPool } from '../../src/mirror/convert-pool.js';
import { htmlToMarkdown, MAX_DEPTH } from '../../src/mirror/markdown.js';

t.test('tables, code with its language, images and links', async (t) => {
  const md = htmlToMarkdown(
    '<h2>T</h2><p>a <a href="x.md">link</a> <img src="media/i.png" alt="i"></p><pre><code class="language-sql">SELECT 1;</code></pre><table><tr><th>h</th></tr><tr><td>c</td></tr></table>',
  );
  t.equal(md, '## T\n\na [link](x.md) ![i](media/i.png)\n\n```sql\nSELECT 1;\n```\n\n| h |\n| - |\n| c |\n');
  t.equal(htmlToMarkdown('  '), '');
  t.equal(
    htmlToMarkdown('<p><a href="other">to</a> <a href="x">x</a></p>', new Map([['other', 'guide/other.md']])),
    '[to](guide/other.md) [x](x)\n',
    'links named in hrefs are relinked',
  );
});

t.test('pathological pages take the fallback within their budget', async (t) => {
  const pool = new ConvertPool(1, { maxBytes: 1_000_000, timeoutMs: 2_000, heapMb: 256 });
  t.teardown(() => pool.close());
  t.same(await pool.convert('<p>fine</p>'), { ok: true, markdown: 'fine\n' }, 'the worker loaded');
  let started = Date.now();
  const big = await pool.convert('<img src="/media/x.png">'.repeat(400_000));
  t.match(big, { ok: false, why: /characters of HTML, over the budget of 1000000/ });
  t.ok(Date.now() - started < 100, 'refused without converting');
  started = Date.now();
  const deep = await pool.convert(`${'<div>'.repeat(MAX_DEPTH * 4)}x${'</div>'.repeat(MAX_DEPTH * 4)}`);
  t.match(deep, { ok: false, why: /nested more than 256 levels deep/ });
  t.ok(Date.now() - started < 2_000, 'within the time budget');
});

t.test('a page over the time budget ends its worker; the next converts', async (t) => {
  const pool = new ConvertPool(1, { maxBytes: 10_000_000, timeoutMs: 300, heapMb: 256 });
  t.teardown(() => pool.close());
  const slow = await pool.convert('<table><tr><td>cell</td></tr></table>'.repeat(40_000));
  t.match(slow, { ok: false, why: /took longer than 300 ms/ });
  t.same(
    await pool.convert('<p>after</p>'),
    { ok: true, markdown: 'after\n' },
    'a new worker, loaded before its budget starts',
  );
});
