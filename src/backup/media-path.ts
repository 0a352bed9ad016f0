/**
 * Which URLs of an export are this service's media, and where each is kept below `--media-dir`:
 * its path below the response's `Export-Media-Prefix`, each segment percent-decoded, so that
 * copying the folder back into a media store puts every object under its name again. The URL is
 * read as a browser reads it (WHATWG URL: `\` is `/`, `.` and `..` segments resolved, `%2e` too),
 * and then refused rather than kept when its path leaves the prefix, or holds a segment that is
 * empty, `.` or `..`, or would name a folder or escape one once decoded (`%2F`, `%5C`, NUL, control
 * characters), or is longer than a file name can be. A refused URL is listed in the manifest as
 * missing, with why; nothing is written for it (D3, D13.3).
 */

/** A media URL of an export as written (trimmed), and where it is kept: `path` relative to DIR, or null with why not. */
export interface MediaRef {
  path: string | null;
  url: string;
  why?: string;
}

/** The base against which prefixes and URLs that are not absolute are resolved when no server is known (verify). */
const NO_SERVER = 'http://kb-export.invalid/';

/** Longest file name most file systems take, in bytes. */
const NAME_MAX = 255;

/** Names of 1 to NAME_MAX plain characters, joined by single slashes. */
const PLAIN_TAIL = new RegExp(`^[A-Za-z0-9._~-]{1,${NAME_MAX}}(?:/[A-Za-z0-9._~-]{1,${NAME_MAX}})*$`);
const DOT_SEGMENT = /(?:^|\/)\.{1,2}(?:\/|$)/;

const FORBIDDEN_IN_NAME = /[/\\\u0000-\u001f\u007f]/;

const isAsciiWhitespace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d;

/** `s` without leading and trailing ASCII white space, as D3.2 trims before it decides. */
export function trimAscii(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && isAsciiWhitespace(s.charCodeAt(a))) a++;
  while (b > a && isAsciiWhitespace(s.charCodeAt(b - 1))) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/** The manifest's and the spill's order: kept paths first, by path, then refused URLs, by URL. */
export function compareRefs(a: MediaRef, b: MediaRef): number {
  const c = keyCompare(a, b);
  if (c !== 0) return c;
  return a.url < b.url ? -1 : a.url > b.url ? 1 : 0;
}

/** The order of compareRefs on what identifies an entry (path, or URL when refused), URLs aside. */
export function keyCompare(a: MediaRef, b: MediaRef): number {
  if ((a.path === null) !== (b.path === null)) return a.path === null ? 1 : -1;
  const x = a.path ?? a.url;
  const y = b.path ?? b.url;
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * The media URLs of one export: those that start with its prefix, resolved against the server
 * when the prefix is not absolute (`/media/` against `--server`; `https://cdn…/m/` as it is).
 */
export class MediaUrls {
  readonly prefixUrl: URL;
  private readonly base: URL;
  /** Whether a URL the prefix's bytes begin can be read without the URL parser (see refOf). */
  private readonly plainPrefix: boolean;

  /** Throws when the prefix is not a URL even against `server` (a bad Export-Media-Prefix). */
  constructor(
    readonly prefix: string,
    server: string | null,
  ) {
    const base = new URL(server ?? NO_SERVER);
    if (!base.pathname.endsWith('/')) base.pathname += '/';
    base.search = '';
    base.hash = '';
    this.base = base;
    this.prefixUrl = new URL(prefix, base);
    this.prefixUrl.search = '';
    this.prefixUrl.hash = '';
    const p = this.prefixUrl;
    // As written, the prefix is what the parser would make of it: a tail of plain names after it
    // then stays as it is, and the parser has nothing to change.
    const relative = prefix.startsWith('/') && !prefix.startsWith('//') && !prefix.startsWith('/\\');
    this.plainPrefix = p.pathname.endsWith('/') && prefix === (relative ? p.pathname : p.href);
  }

  /** Whether an attribute value or cover URL, trimmed, is this service's media: it starts with the prefix. */
  matches(trimmed: string): boolean {
    return trimmed.startsWith(this.prefix);
  }

  /** The URL to fetch for a value (its fragment dropped), or null when it is none. */
  fetchUrl(value: string): URL | null {
    try {
      const url = new URL(value, this.base);
      url.hash = '';
      return url;
    } catch {
      return null;
    }
  }

  /**
   * Where a value that matches is kept below DIR, or why it is not. A value that is the prefix and
   * then plain names (letters, digits, `-._~`, no `.` or `..` segment) is read as it stands: the
   * URL parser would resolve, encode and decode nothing in it, and most media URLs are such.
   */
  refOf(value: string): MediaRef {
    if (this.plainPrefix && value.length > this.prefix.length && value.startsWith(this.prefix)) {
      const tail = value.slice(this.prefix.length);
      if (PLAIN_TAIL.test(tail) && !DOT_SEGMENT.test(tail)) return { path: tail, url: value };
    }
    return this.parsedRef(value);
  }

  /** refOf() by the URL parser alone: the rule as written, which refOf's shortcut must agree with. */
  parsedRef(value: string): MediaRef {
    const url = this.fetchUrl(value);
    if (url === null) return { path: null, url: value, why: 'not a URL' };
    const prefix = this.prefixUrl;
    if (url.origin !== prefix.origin || !url.pathname.startsWith(prefix.pathname)) {
      return { path: null, url: value, why: `resolves to ${url.pathname}, outside the prefix ${prefix.pathname}` };
    }
    const segments = url.pathname.slice(prefix.pathname.length).split('/');
    const names: string[] = [];
    for (const segment of segments) {
      const why = badSegment(segment);
      if (typeof why === 'string') return { path: null, url: value, why };
      names.push(why.name);
    }
    return { path: names.join('/'), url: value };
  }
}

/** A segment's decoded name, or why it cannot be one. */
function badSegment(segment: string): { name: string } | string {
  if (segment === '') return 'an empty path segment (a folder, or `//`)';
  let name: string;
  try {
    name = decodeURIComponent(segment);
  } catch {
    return `bad percent-encoding in "${segment}"`;
  }
  if (name === '.' || name === '..') return `a "${name}" segment`;
  if (FORBIDDEN_IN_NAME.test(name)) return `"${segment}" decodes to a name with "/", "\\" or a control character`;
  if (Buffer.byteLength(name) > NAME_MAX) return `a name longer than ${NAME_MAX} bytes`;
  return { name };
}
