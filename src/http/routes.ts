/** The served paths and their methods: the router and the 405 answers (D7.3) read the same list. */

export const EXPORT_PATH = '/api/v1/open/books/:bookSlug/docs';

interface ServedRoute {
  /** The path in the router's syntax (`:name` is one segment). */
  path: string;
  pattern: RegExp;
  allow: string;
}

function served(path: string, methods: readonly string[]): ServedRoute {
  const source = path
    .split('/')
    .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return { path, pattern: new RegExp(`^${source}$`), allow: methods.join(', ') };
}

export const ROUTES: readonly ServedRoute[] = [
  served(EXPORT_PATH, ['GET', 'HEAD']),
  served('/livez', ['GET', 'HEAD']),
  served('/readyz', ['GET', 'HEAD']),
  served('/openapi.json', ['GET', 'HEAD']),
];

/** The longest `changedSince` the export takes: above any change token the service issues (change-token.ts checks it), far below Node.js's header limit (D12.8). */
export const MAX_CHANGED_SINCE_CHARS = 4096;
