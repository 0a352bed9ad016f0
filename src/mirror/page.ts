/**
 * One document as a file of the mirror: a Markdown page (YAML frontmatter, then the body converted,
 * or the HTML kept when the converter could not take it) or an HTML page (the stored HTML with
 * scripts removed by sanitize-html, a link back to the index). Media URLs of the export (those under
 * its Export-Media-Prefix, D3/D13.3) point to `media/` relatively when the file was saved there,
 * and to the server otherwise, so no link of a mirror depends on where it is served from.
 * What a page holds depends on the document, its own path and the paths of the pages it links to
 * (DocLinks), so a change elsewhere in the tree leaves its bytes alone unless it moves a target.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import sanitizeHtml from 'sanitize-html';
import { rewriteHtml, urlTransformRules } from '../export/rewrite/rewriter/html-rewriter.js';
import { trimAscii, type MediaUrls } from '../backup/media-path.js';
import { SyncSaxParser } from '../export/rewrite/rewriter/html-tokenizer.js';
import { linkPath, relativeLink } from './tree.js';

/** A document of the export as the mirror reads it (export-api.md 2.2). */
export interface ExportDoc {
  id: string;
  slug: string;
  name: string;
  type: string;
  parentId: string | null;
  orderKey: string;
  description: string | null;
  emojiInfo: string | null;
  cover: { url: string; position: string } | null;
  tags: string[] | null;
  createdAt: string;
  updatedAt: string;
  contentStr: string | null;
  contentHtml: string | null;
}

/** Where the export's media URLs lead from a page: `media/…` when saved there, else the server's absolute URL. */
export class MediaLinks {
  /**
   * `media`: the export's media URLs (null when the server sent no prefix: nothing is changed);
   * `mediaDir`: the mirror's `media/` folder (absolute) when `--media` saved files there.
   */
  constructor(
    private readonly media: MediaUrls | null,
    private readonly mediaDir: string | null,
  ) {}

  /** The URL to write in page `from` (a mirror path) for `value` as stored. */
  link(value: string, from: string): string {
    const trimmed = trimAscii(value);
    if (this.media === null || !this.media.matches(trimmed)) return value;
    const ref = this.media.refOf(trimmed);
    if (this.mediaDir !== null && ref.path !== null && existsSync(path.join(this.mediaDir, ...ref.path.split('/'))))
      return relativeLink(from, `media/${linkPath(ref.path)}`);
    return this.media.fetchUrl(trimmed)?.href ?? value;
  }

  /** `html` with every media attribute (D3.3) linked from page `from`. */
  html(html: string, from: string): string {
    if (this.media === null) return html;
    return rewriteHtml(
      html,
      urlTransformRules((url) => this.link(url, from)),
    );
  }
}

/**
 * Links between documents: a relative `<a href>` (no scheme, not `/…`, `#…` or `//…`) whose last
 * path segment, percent-decoded and without `.html`/`.htm`, is a document's slug (D3.3's
 * `<a href="other-doc">`; a folder of pages loaded with import-html links `other.html`) leads to
 * that document's page in the mirror, its `#fragment` kept. Among documents sharing a slug, the
 * first created (then smallest id) is the target. Anything else is left as stored (D14.3).
 */
export class DocLinks {
  /** `bySlug`: slug → mirror path of the document it names (a Map, or a table on disk). */
  constructor(private readonly bySlug: { get(slug: string): string | undefined }) {}

  /** The mirror link for `href` from page `from`, or null when it names no document. */
  target(href: string, from: string): string | null {
    const v = trimAscii(href);
    if (v === '' || v.startsWith('#') || v.startsWith('/') || /^[A-Za-z][A-Za-z0-9+.-]*:/.test(v)) return null;
    const cut = v.search(/[?#]/);
    const pathPart = cut === -1 ? v : v.slice(0, cut);
    const hash = v.indexOf('#');
    let last = pathPart.slice(pathPart.lastIndexOf('/') + 1);
    try {
      last = decodeURIComponent(last);
    } catch {
      return null;
    }
    const to = this.bySlug.get(last.replace(/\.html?$/i, '')) ?? this.bySlug.get(last);
    if (to === undefined) return null;
    return `${relativeLink(from, linkPath(to))}${hash === -1 ? '' : v.slice(hash)}`;
  }

  /** Each `<a href>` value of `html` (as parsed) that names a document, with its link from page `from`. */
  hrefsOf(html: string, from: string): Map<string, string> {
    const out = new Map<string, string>();
    if (!/<a[\s>]/i.test(html)) return out;
    const sax = new SyncSaxParser((tag) => {
      if (tag.tagName !== 'a') return;
      const href = tag.attrs.find((a) => a.name === 'href')?.value;
      if (href === undefined || out.has(href)) return;
      const to = this.target(href, from);
      if (to !== null) out.set(href, to);
    });
    sax.tokenize(html, true);
    return out;
  }
}

/** A YAML value: JSON's strings, numbers, null, arrays and objects are YAML flow scalars and collections. */
const yaml = (v: unknown) => JSON.stringify(v);

/** The YAML frontmatter of a document, fields in a fixed order (the page's first bytes). */
export function frontmatter(doc: ExportDoc, cover: ExportDoc['cover']): string {
  const fields: [string, unknown][] = [
    ['id', doc.id],
    ['title', doc.name],
    ['slug', doc.slug],
    ['type', doc.type],
    ['parentId', doc.parentId],
    ['orderKey', doc.orderKey],
    ['tags', doc.tags ?? []],
    ['description', doc.description],
    ['emoji', doc.emojiInfo],
    ['cover', cover],
    ['createdAt', doc.createdAt],
    ['updatedAt', doc.updatedAt],
  ];
  return `---\n${fields.map(([k, v]) => `${k}: ${yaml(v)}`).join('\n')}\n---\n`;
}

/** The cover with its URL linked from page `from`. */
export function linkedCover(doc: ExportDoc, from: string, links: MediaLinks): ExportDoc['cover'] {
  return doc.cover === null ? null : { url: links.link(doc.cover.url, from), position: doc.cover.position };
}

/** A Markdown page: frontmatter, a blank line, then the body, or the HTML with a note of why it was kept. */
export function markdownPage(front: string, body: { markdown: string } | { html: string; why: string }): string {
  if ('markdown' in body) return body.markdown === '' ? front : `${front}\n${body.markdown}`;
  const note = `<!-- kb-export mirror: kept as HTML (${body.why.replace(/--/g, '- -')}) -->`;
  return `${front}\n${note}\n\n${body.html}\n`;
}

/**
 * The HTML as stored, less what runs: script elements and their text, event handler attributes,
 * javascript: URLs; `<a href>` values that are keys of `hrefs` replaced by theirs.
 */
export function withoutScripts(html: string, hrefs: ReadonlyMap<string, string> = new Map()): string {
  return sanitizeHtml(html, {
    allowedTags: false,
    allowedAttributes: false,
    allowVulnerableTags: true,
    // Empty attributes (`download`, `hidden`) are kept as stored.
    nonBooleanAttributes: [],
    // The stored markup is kept as it is but for what runs or loads another page into this one;
    // <object> stays: it is how the knowledge base shows diagrams (D3.3 counts it as media).
    exclusiveFilter: (frame) => ['script', 'iframe', 'frame', 'frameset', 'embed', 'base'].includes(frame.tag),
    nonTextTags: ['script', 'style', 'textarea', 'option', 'noscript'],
    transformTags: {
      '*': (tagName, attribs) => {
        const kept = Object.fromEntries(Object.entries(attribs).filter(([name]) => !/^on/i.test(name)));
        const to = tagName === 'a' && kept.href !== undefined ? hrefs.get(kept.href) : undefined;
        return { tagName, attribs: to === undefined ? kept : { ...kept, href: to } };
      },
    },
  });
}

const escapeHtml = (s: string) =>
  s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

const STYLE =
  'body{max-width:52rem;margin:0 auto;padding:1rem 1.5rem;font:16px/1.5 system-ui,sans-serif}' +
  'img{max-width:100%}pre{overflow:auto;background:#f4f4f4;padding:.5rem}table{border-collapse:collapse}' +
  'td,th{border:1px solid #ccc;padding:.2rem .4rem}nav{font-size:.9rem}';

/** An HTML page of the mirror: `title`, then `body` (trusted markup), with a link to the top index from `from`. */
export function htmlDocument(title: string, body: string, from: string | null): string {
  const [head, tail] = htmlDocumentParts(title, from);
  return `${head}${body}${tail}`;
}

/** htmlDocument's bytes before and after its body, for a body written in parts. */
export function htmlDocumentParts(title: string, from: string | null): [string, string] {
  const nav = from === null ? '' : `<nav><a href="${relativeLink(from, 'index.html')}">Contents</a></nav>\n`;
  return [
    `<!doctype html>\n<html>\n<head>\n<meta charset="utf-8">\n` +
      `<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>${escapeHtml(title)}</title>\n` +
      `<style>${STYLE}</style>\n</head>\n<body>\n${nav}<main>\n<h1>${escapeHtml(title)}</h1>\n`,
    `\n</main>\n</body>\n</html>\n`,
  ];
}

/** A document as an HTML page at `from`, its metadata in a definition list after the content. */
export function htmlPage(
  doc: ExportDoc,
  from: string,
  links: MediaLinks,
  hrefs: ReadonlyMap<string, string> = new Map(),
): string {
  const content = withoutScripts(links.html(doc.contentHtml ?? '', from), hrefs);
  const cover = linkedCover(doc, from, links);
  const coverHtml = cover === null ? '' : `<p><img src="${escapeHtml(cover.url)}" alt=""></p>\n`;
  const tags = doc.tags && doc.tags.length > 0 ? `<p>Tags: ${doc.tags.map(escapeHtml).join(', ')}</p>\n` : '';
  return htmlDocument(doc.name || doc.slug, `${coverHtml}${content}\n${tags}`, from);
}
