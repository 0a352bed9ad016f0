/**
 * Media URLs of imported pages made root-relative, so that one media proxy prefix serves a whole
 * corpus (`library/os.html`'s `../_images/x.png` becomes `/_images/x.png`). The attributes are
 * found and spliced by the export's HtmlMediaRewriter (decisions.md D3.3-D3.5), so a page's other
 * bytes stay as written; only the URL rule differs.
 */
import { HtmlMediaRewriter, mayNeedRewrite, urlTransformRules } from '../export/html-rewriter.js';

/**
 * Resolves a media/attachment URL found in page `pagePath` (relative to the corpus root, e.g.
 * `library/os.html`) into a root-relative URL (`../_images/x.png` -> `/_images/x.png`).
 * URLs with a scheme, protocol-relative (`//`), fragment-only (`#`), already root-relative or
 * empty are returned unchanged; `..` above the root is clamped to the root. `?query` and
 * `#fragment` are kept as written; surrounding whitespace is kept too.
 */
export function resolveCorpusUrl(url: string, pagePath: string): string {
  const m = /^([\t\n\f\r ]*)(.*?)([\t\n\f\r ]*)$/s.exec(url);
  const lead = m?.[1] ?? '';
  const core = m?.[2] ?? url;
  const trail = m?.[3] ?? '';
  if (
    core === '' ||
    core.startsWith('/') ||
    core.startsWith('#') ||
    // Browsers read `\\host` like `//host` for http(s), so it is not a path either.
    core.startsWith('\\') ||
    /^[A-Za-z][A-Za-z0-9+.-]*:/.test(core)
  ) {
    return url;
  }
  const cut = core.search(/[?#]/);
  const path = cut === -1 ? core : core.slice(0, cut);
  const suffix = cut === -1 ? '' : core.slice(cut);

  const segments = pagePath.replace(/^\/+/, '').split('/');
  const file = segments.pop() ?? '';
  // `?q` alone refers to the page itself, as in a browser.
  if (path === '') return `${lead}/${[...segments, file].join('/')}${suffix}${trail}`;

  const parts = path.split('/');
  for (const part of parts) {
    // The URL standard also treats percent-encoded dots as dot segments; clamping must see them.
    const p = part.toLowerCase();
    if (p === '.' || p === '%2e') continue;
    if (p === '..' || p === '.%2e' || p === '%2e.' || p === '%2e%2e') {
      segments.pop();
      continue;
    }
    segments.push(part);
  }
  const last = parts[parts.length - 1]?.toLowerCase() ?? '';
  const dirLike = last === '' || last === '.' || last === '..' || last === '%2e' || last === '.%2e' || last === '%2e.' || last === '%2e%2e';
  const joined = segments.filter((s, i) => s !== '' || i === segments.length - 1).join('/');
  const resolved = `/${joined}${dirLike && joined !== '' && !joined.endsWith('/') ? '/' : ''}`;
  return `${lead}${resolved}${suffix}${trail}`;
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
  const out = rw.write(html) + rw.end();
  return { html: out, count: rw.rewrittenCount };
}
