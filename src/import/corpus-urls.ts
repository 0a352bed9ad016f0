/**
 * Media URLs of imported pages made root-relative, so that one media proxy prefix serves a whole
 * corpus (`library/os.html`'s `../_images/x.png` becomes `/_images/x.png`). The attributes are
 * found and spliced by the export's HtmlMediaRewriter (decisions.md D3.3-D3.5), so a page's other
 * bytes stay as written; only the URL rule differs.
 */
import { HtmlMediaRewriter, mayNeedRewrite, urlTransformRules } from '../export/rewrite/html-rewriter.js';
import { appendPath, isPathSlash, pathNeedsNormalising } from '../export/rewrite/url-path.js';

/**
 * Resolves a media/attachment URL found in page `pagePath` (relative to the corpus root, e.g.
 * `library/os.html`) into a root-relative URL (`../_images/x.png` -> `/_images/x.png`).
 * The path is read as a browser reads it (decisions.md D3.7, through url-path.ts): `\` is a `/`,
 * `.` and `..` segments, also written with `%2e`, are resolved, and `..` above the root is clamped
 * to the root. So no `\` is left in a resolved path: a root-relative `\x.png` or `/a\..\x.png`
 * becomes `/x.png` (an already root-relative URL is otherwise returned unchanged), and `\\host\x`,
 * which a browser fetches from `host`, becomes the protocol-relative `//host/x`.
 * URLs with a scheme, protocol-relative (`//`), fragment-only (`#`) or empty are returned
 * unchanged. `?query` and `#fragment` are kept as written; surrounding whitespace is kept too.
 */
function resolveCorpusUrl(url: string, pagePath: string): string {
  const m = /^([\t\n\f\r ]*)(.*?)([\t\n\f\r ]*)$/s.exec(url);
  const lead = m?.[1] ?? '';
  const core = m?.[2] ?? url;
  const trail = m?.[3] ?? '';
  if (core === '' || core.startsWith('#') || /^[A-Za-z][A-Za-z0-9+.-]*:/.test(core)) return url;
  const cut = core.search(/[?#]/);
  const path = cut === -1 ? core : core.slice(0, cut);
  const suffix = cut === -1 ? '' : core.slice(cut);

  if (isPathSlash(path.charCodeAt(0))) {
    // Two slashes of either kind start a host, as in a browser: not a path in the corpus.
    if (isPathSlash(path.charCodeAt(1))) {
      return path.includes('\\') ? `${lead}${path.replaceAll('\\', '/')}${suffix}${trail}` : url;
    }
    if (!pathNeedsNormalising(path, 0, path.length)) return url;
    return `${lead}${rootRelative([], path)}${suffix}${trail}`;
  }
  const segments = pagePath.replace(/^\/+/, '').split('/');
  const file = segments.pop() ?? '';
  // `?q` alone refers to the page itself, as in a browser.
  if (path === '') return `${lead}/${[...segments, file].join('/')}${suffix}${trail}`;
  return `${lead}${rootRelative(segments, path)}${suffix}${trail}`;
}

/** `/` + the directory `dir` (segments) with `path` resolved in it, empty segments left out. */
function rootRelative(dir: string[], path: string): string {
  const names = [...dir];
  const dirLike = appendPath(names, path, 0, path.length);
  const joined = names.filter((s, i) => s !== '' || i === names.length - 1).join('/');
  return `/${joined}${dirLike && joined !== '' && !joined.endsWith('/') ? '/' : ''}`;
}

/**
 * Rewrites the media URLs of `html` (a page's body, found in the page at `pagePath`) to
 * root-relative ones with resolveCorpusUrl, each `srcset` candidate on its own. `count` is how
 * many attribute values changed.
 */
export function rewriteCorpusUrls(html: string, pagePath: string): { html: string; count: number } {
  // Most pages of a manual have no media at all, and the rewriter's tokenizer costs a parse.
  if (!mayNeedRewrite(html)) return { html, count: 0 };
  const rw = new HtmlMediaRewriter(urlTransformRules((url) => resolveCorpusUrl(url, pagePath)));
  const out = rw.rewrite(html);
  return { html: out, count: rw.rewrittenCount };
}
