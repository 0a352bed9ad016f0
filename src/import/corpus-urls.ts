/** import-html's media URLs made root-relative, so one prefix serves a corpus; the export's rewriter finds them. */
import { HtmlMediaRewriter, mayNeedRewrite, urlTransformRules } from '../export/rewrite/rewriter/html-rewriter.js';
import { appendPath, isPathSlash, pathNeedsNormalising } from '../export/rewrite/rewriter/url-path.js';

/**
 * In page `library/os.html`, `../_images/x.png` -> `/_images/x.png`, read as a browser does (D3.7): `\`
 * is `/`, `.` and `..` (also `%2e`) resolve, clamped at the root; `\\host\x` is `//host/x`. A scheme,
 * `//`, `#` or empty URL stays; query, fragment and outer whitespace are kept.
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

function rootRelative(dir: string[], path: string): string {
  const names = [...dir];
  const dirLike = appendPath(names, path, 0, path.length);
  const joined = names.filter((s, i) => s !== '' || i === names.length - 1).join('/');
  return `/${joined}${dirLike && joined !== '' && !joined.endsWith('/') ? '/' : ''}`;
}

/** `count`: how many attribute values changed. */
export function rewriteCorpusUrls(html: string, pagePath: string): { html: string; count: number } {
  // Most pages of a manual have no media at all, and the rewriter's tokenizer costs a parse.
  if (!mayNeedRewrite(html)) return { html, count: 0 };
  const rw = new HtmlMediaRewriter(urlTransformRules((url) => resolveCorpusUrl(url, pagePath)));
  const out = rw.rewrite(html);
  return { html: out, count: rw.rewrittenCount };
}

/** rewriteCorpusUrls of `html[from, to)`, tokenizing again only the media `tags` the page's pass found. */
export function rewriteCorpusTags(
  html: string,
  from: number,
  to: number,
  tags: readonly (readonly [number, number])[],
  pagePath: string,
): { html: string; count: number } {
  const body = html.slice(from, to);
  if (tags.length === 0) return { html: body, count: 0 };
  let joined = '';
  const at: number[] = [];
  for (const [start, end] of tags) {
    at.push(joined.length);
    joined += html.slice(start, end);
  }
  if (!mayNeedRewrite(joined)) return { html: body, count: 0 };
  const edits = new HtmlMediaRewriter(urlTransformRules((url) => resolveCorpusUrl(url, pagePath))).editsOf(joined);
  if (edits.length === 0) return { html: body, count: 0 };
  let out = '';
  let pos = from;
  let tag = 0;
  for (const e of edits) {
    while (tag + 1 < at.length && at[tag + 1]! <= e.start) tag++;
    const shift = tags[tag]![0] - at[tag]!;
    out += html.slice(pos, e.start + shift) + e.text;
    pos = e.end + shift;
  }
  return { html: out + html.slice(pos, to), count: edits.length };
}
