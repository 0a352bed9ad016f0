/**
 * The paths the server serves and the methods each allows: the router registers them, and the
 * error handling answers 405 with `Allow` on them (decisions.md D7.3) from the same list.
 */

/** The open API's one operation (export-api.md 4.1), in the router's syntax. */
export const EXPORT_PATH = '/api/v1/open/books/:bookSlug/docs';

interface ServedRoute {
  /** The path in the router's syntax (`:name` is one segment). */
  path: string;
  /** What the path matches, derived from `path`. */
  pattern: RegExp;
  /** The `Allow` header's value. */
  allow: string;
}

function served(path: string, methods: readonly string[]): ServedRoute {
  const source = path
    .split('/')
    .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return { path, pattern: new RegExp(`^${source}$`), allow: methods.join(', ') };
}

/** Paths served, with the methods they allow: anything else on them is 405. */
export const ROUTES: readonly ServedRoute[] = [
  served(EXPORT_PATH, ['GET', 'HEAD']),
  served('/livez', ['GET', 'HEAD']),
  served('/readyz', ['GET', 'HEAD']),
  served('/openapi.json', ['GET', 'HEAD']),
];
