/** The HTML elements `import-html`'s page reader (html-page.ts) treats apart, as the tree builder would. */

/** Elements whose text is not the page's (template: its content is not part of the document). */
export const SKIPPED = new Set(['script', 'style', 'noscript', 'template']);

/** Elements that put their text on lines of their own (the body's own tags add nothing to trimmed text). */
export const BLOCKS = new Set([
  'address',
  'article',
  'aside',
  'blockquote',
  'body',
  'br',
  'caption',
  'center',
  'dd',
  'details',
  'dialog',
  'dir',
  'div',
  'dl',
  'dt',
  'fieldset',
  'figcaption',
  'figure',
  'footer',
  'form',
  'h1',
  'h2',
  'h3',
  'h4',
  'h5',
  'h6',
  'header',
  'hgroup',
  'hr',
  'legend',
  'li',
  'listing',
  'main',
  'menu',
  'nav',
  'ol',
  'option',
  'p',
  'pre',
  'section',
  'summary',
  'table',
  'tbody',
  'tfoot',
  'thead',
  'tr',
  'ul',
  'xmp',
]);

/** Start tags the tree builder keeps in <head>: before the body they do not start it. */
export const HEAD_TAGS = new Set([
  'html',
  'head',
  'base',
  'basefont',
  'bgsound',
  'link',
  'meta',
  'noframes',
  'script',
  'style',
  'template',
  'title',
  'noscript',
]);

/** End tags that, before any body content, make the tree builder open the body. */
export const BODY_OPENING_END_TAGS = new Set(['body', 'html', 'br']);

export const HEADINGS = new Set(['h1', 'h2', 'h3', 'h4', 'h5', 'h6']);

/** Start tags whose URLs import-html rewrites (D3.3; `a` only as an attachment). */
export const MEDIA = new Set(['img', 'source', 'video', 'audio', 'track', 'embed', 'object', 'a']);

export const VOID = new Set([
  'area',
  'base',
  'basefont',
  'bgsound',
  'br',
  'col',
  'embed',
  'frame',
  'hr',
  'img',
  'input',
  'keygen',
  'link',
  'meta',
  'param',
  'source',
  'track',
  'wbr',
]);

/** Elements a </body> cannot close from inside (they bound its scope), with the cells of a table. */
export const SCOPES = new Set(['table', 'caption', 'td', 'th', 'object', 'applet', 'marquee']);
export const CELLS = new Set(['td', 'th']);
/** Start tags that close an open cell or caption of their table. */
export const CLOSE_CELL = new Set(['td', 'th', 'tr', 'tbody', 'thead', 'tfoot', 'caption', 'col', 'colgroup']);

/** In the data state, what never became a token: `</>`, and a tag cut off by the end of the page. */
export const DROPPED_IN_DATA = /<\/>/g;
export const TAG_AT_EOF = /<\/?[A-Za-z]/;
