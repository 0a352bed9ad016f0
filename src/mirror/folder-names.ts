/**
 * names.ts's uniqueNames for a folder too large to hold: the same names by the same rule, the
 * siblings sorted on disk (the backup's SortedSpill) and the names in use kept in a DiskTable, so
 * a folder of a million documents costs a spill's run of memory (D14.6).
 */
import { SortedSpill } from '../backup/sorted-spill.js';
import type { DiskTable } from './disk-table.js';
import { cutUtf8, idTag, NAME_BYTES, nameKey, type NameRequest } from './names.js';

interface Keyed {
  k: string;
  r: NameRequest;
}

const textOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Calls `put(id, name)` for each of `siblings` (read once) with the name uniqueNames would give
 * it. `used` is a table for this folder's names in use, keyed by `folder` and the name's key;
 * `taken` as in uniqueNames. Rejects with the file system's errors.
 */
export async function uniqueNamesOnDisk(
  siblings: Iterable<NameRequest>,
  taken: ReadonlySet<string>,
  used: DiskTable<1>,
  folder: string,
  put: (id: string, name: string) => void,
): Promise<void> {
  const groups = new SortedSpill<Keyed>({
    compare: (a, b) => textOrder(a.k, b.k) || textOrder(a.r.createdAt, b.r.createdAt) || textOrder(a.r.id, b.r.id),
    same: () => false,
  });
  const later = new SortedSpill<NameRequest>({ compare: (a, b) => textOrder(a.id, b.id), same: () => false });
  const mark = (k: string) => used.set(`${folder}\u0000${k}`, 1);
  const inUse = (k: string) => taken.has(k) || used.has(`${folder}\u0000${k}`);
  try {
    for (const r of siblings) await groups.add({ k: nameKey(r.base, r.ext), r }, r.id.length + r.base.length + 64);
    let last: string | null = null;
    for await (const { k, r } of groups.sorted()) {
      // The first of each group (created first, then the smallest id) keeps its name unless the folder keeps it.
      if (k !== last && !taken.has(k)) {
        put(r.id, `${r.base}${r.ext}`);
        mark(k);
      } else await later.add(r, r.id.length + r.base.length + 64);
      last = k;
    }
    for await (const s of later.sorted()) {
      for (let length = 8; ; length += 8) {
        const base = `${cutUtf8(s.base, NAME_BYTES)}-${idTag(s.id, Math.min(length, 64))}`;
        if (!inUse(nameKey(base, s.ext)) || length >= 64) {
          put(s.id, `${base}${s.ext}`);
          mark(nameKey(base, s.ext));
          break;
        }
      }
    }
  } finally {
    await groups.close();
    await later.close();
  }
}
