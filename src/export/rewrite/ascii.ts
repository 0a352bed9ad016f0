/** Character classes the URL and HTML specs share, tested on UTF-16 code units. */

/** ASCII white space as the URL and HTML specs define it: TAB, LF, FF, CR, SPACE. */
export function isAsciiWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d;
}

/** `A`-`Z` or `a`-`z`. */
export function isAsciiAlpha(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
}
