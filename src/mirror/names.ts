/**
 * File and folder names of a mirror, made from document slugs so that the same tree can be checked
 * out on Linux, macOS and Windows: characters Windows forbids and control characters become `-`,
 * trailing dots and spaces go, device names (CON, NUL, COM1…) get a `_`, names are NFC (what macOS
 * gives back) and at most NAME_BYTES of UTF-8. Siblings are told apart case-insensitively, and a
 * collision is settled by a rule that does not depend on the order documents arrive in: the
 * document created first (then the smaller id) keeps the name, the others get a suffix made from
 * their id, so a document keeps its path until its own slug or parent changes.
 */
import { createHash } from 'node:crypto';

/** The longest base name kept from a slug, in UTF-8 bytes; suffixes and `.md` fit under the usual 255. */
export const NAME_BYTES = 120;

const FORBIDDEN = /[<>:"/\\|?*\u0000-\u001f\u007f]/g;
const DEVICE = /^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)$/i;

/** `s` cut to at most `bytes` UTF-8 bytes, never inside a code point. */
export function cutUtf8(s: string, bytes: number): string {
  if (Buffer.byteLength(s) <= bytes) return s;
  let out = '';
  let used = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (used + n > bytes) break;
    out += ch;
    used += n;
  }
  return out;
}

/** A short, stable tag of a document id: 8 hex digits of its SHA-256. */
export function idTag(id: string, length = 8): string {
  return createHash('sha256').update(id).digest('hex').slice(0, length);
}

/**
 * The base name (no extension) a slug gives, safe on the three systems. An empty result (a slug of
 * dots or forbidden characters only) becomes `untitled`. `reserved` names (lower case) get a `_`.
 */
export function safeBaseName(slug: string, reserved: ReadonlySet<string> = new Set()): string {
  let name = slug.normalize('NFC').replace(FORBIDDEN, '-');
  name = cutUtf8(name, NAME_BYTES)
    .replace(/[. ]+$/, '')
    .replace(/^ +/, '');
  // A leading dot hides the file on Unix and could name the mirror's own `.kb-export`.
  if (name.startsWith('.')) name = `_${name}`;
  if (name === '') name = 'untitled';
  // Windows refuses a device name with any extension too: `CON.md`, `nul.tar.gz`.
  const stem = name.split('.')[0]!;
  if (DEVICE.test(stem) || reserved.has(name.toLowerCase())) name = `${name}_`;
  return name;
}

/** One sibling to name: its id, creation time (ISO 8601, compared as text) and wanted base name. */
export interface NameRequest {
  id: string;
  createdAt: string;
  base: string;
  /** What follows the base on disk: `.md` or `.html` for a file, '' for a folder. */
  ext: string;
}

/** What two sibling names are compared by: the name on disk, lower case. */
export const nameKey = (base: string, ext: string) => `${base}${ext}`.toLowerCase();
const key = nameKey;

/**
 * Unique names for one folder's entries, keyed by id: `base + ext` as wanted, except that among
 * names equal ignoring case the earliest created (then smallest id, byte-wise) keeps it and each
 * other gets `-` and idTag(id). A suffixed name that still meets another gets a longer tag.
 * `taken` are names (lower case, with extension) the folder already uses for itself.
 */
export function uniqueNames(
  siblings: readonly NameRequest[],
  taken: ReadonlySet<string> = new Set(),
): Map<string, string> {
  const byKey = new Map<string, NameRequest[]>();
  for (const s of siblings) {
    const k = key(s.base, s.ext);
    const group = byKey.get(k);
    if (group === undefined) byKey.set(k, [s]);
    else group.push(s);
  }
  const out = new Map<string, string>();
  const used = new Set(taken);
  const later: NameRequest[] = [];
  for (const group of byKey.values()) {
    group.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1));
    const [first, ...rest] = group;
    if (used.has(key(first!.base, first!.ext))) later.push(first!);
    else {
      out.set(first!.id, `${first!.base}${first!.ext}`);
      used.add(key(first!.base, first!.ext));
    }
    later.push(...rest);
  }
  later.sort((a, b) => (a.id < b.id ? -1 : 1));
  for (const s of later) {
    for (let length = 8; ; length += 8) {
      const base = `${cutUtf8(s.base, NAME_BYTES)}-${idTag(s.id, Math.min(length, 64))}`;
      if (!used.has(key(base, s.ext)) || length >= 64) {
        out.set(s.id, `${base}${s.ext}`);
        used.add(key(base, s.ext));
        break;
      }
    }
  }
  return out;
}
