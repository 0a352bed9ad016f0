/** `If-None-Match` (D9.2, RFC 9110 13.1.2): `*` or entity tags compared weakly. */
export function ifNoneMatchHits(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const value = header.trim();
  if (value === '*') return true;
  const opaque = etag.startsWith('W/') ? etag.slice(2) : etag;
  for (const part of value.split(',')) {
    const tag = part.trim();
    if ((tag.startsWith('W/') ? tag.slice(2) : tag) === opaque) return true;
  }
  return false;
}
