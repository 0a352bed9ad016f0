/** Links between documents (src/mirror/page.ts DocLinks): which hrefs name a document, and where they lead from a page. */
import t from 'tap';
import { DocLinks, withoutScripts } from '../../src/mirror/page.js';

const links = new DocLinks(
  new Map([
    ['pic', 'guide/pic.md'],
    ['a b', 'a b.md'],
  ]),
);

t.test('a relative href naming a slug leads to its page, fragment kept', async (t) => {
  t.equal(links.target('pic', 'x.md'), 'guide/pic.md');
  t.equal(links.target(' pic.html#top ', 'deep/x.md'), '../guide/pic.md#top');
  t.equal(links.target('../other/pic.htm?v=1', 'x.md'), 'guide/pic.md');
  t.equal(links.target('a%20b', 'x.md'), 'a%20b.md');
  for (const href of ['', '#pic', '/pic', '//host/pic', 'https://x/pic', 'mailto:pic', 'nope', '%E0%A4%A'])
    t.equal(links.target(href, 'x.md'), null, `${JSON.stringify(href)} is left as stored`);
});

t.test('the hrefs of a page, in the HTML format too', async (t) => {
  const html = '<p><a href="pic#x">p</a> <A HREF="nope">n</A> <a>none</a> <a href="pic#x">again</a></p>';
  t.same([...links.hrefsOf(html, 'x.md')], [['pic#x', 'guide/pic.md#x']]);
  t.same([...links.hrefsOf('<p>no links</p>', 'x.md')], []);
  t.equal(
    withoutScripts(html, links.hrefsOf(html, 'x.md')),
    '<p><a href="guide/pic.md#x">p</a> <a href="nope">n</a> <a>none</a> <a href="guide/pic.md#x">again</a></p>',
  );
});
