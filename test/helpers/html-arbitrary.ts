/**
 * Random HTML for property tests of the media rewriter and what is built on it (fast-check): media
 * tags, character references, quotes, JSON escapes and astral characters, mixed with any text.
 */
import fc from 'fast-check';

/** HTML made of pieces that stress the splice: media tags, references, quotes, escapes, astral characters. */
const fragment = fc.constantFrom(
  '<img src="a.png">',
  '<img src=\'../x/y.png\' alt="é">',
  '<img src=u.png>',
  '<img srcset="a.png 1x, b.png 2x">',
  '<a href="f.pdf" download>f</a>',
  '<video poster="p.jpg" src="v.mp4"></video>',
  '<img src="&#x61;.png">',
  '<img src="sp ace.png">',
  '<img src="/media/x.png">',
  '<img src="data:image/png;base64,AAAA">',
  '<!-- <img src="c.png"> -->',
  '"quoted" \\ back\\slash',
  '\u0001\u001f\u007f',
  '\n\r\t',
  'naïve 日本 😀 \ud83d\ude00',
  '\u2028\u2029',
  '<p>text</p>',
);
/** Documents of up to 12 pieces, fragments or any 8 UTF-16 units. */
export const arbitraryHtml = fc
  .array(fc.oneof(fragment, fc.string({ unit: 'binary', maxLength: 8 })), { maxLength: 12 })
  .map((xs) => xs.join(''));

/** arbitraryHtml as PostgreSQL can store it: no NUL, no lone surrogate. */
export const storableHtml = arbitraryHtml.map((h) =>
  h.replace(/\0/g, '').replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'),
);
