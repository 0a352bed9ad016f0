/**
 * The spill that sorts and deduplicates the media URLs of an export in bounded memory
 * (src/backup/sorted-spill.ts): the same records as an in-memory sort and dedupe, whether they fit
 * one run or spill into many (merged more than FAN_IN at a time too), the first of each group of
 * duplicates kept, and no run file left once closed.
 */
import { existsSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { SortedSpill } from '../../src/backup/sorted-spill.js';

interface Rec {
  k: string;
  v: number;
}

const order = (runRecords?: number) => ({
  compare: (a: Rec, b: Rec) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.v - b.v),
  same: (a: Rec, b: Rec) => a.k === b.k,
  ...(runRecords !== undefined ? { runRecords } : {}),
});

/** What the spill should give: sorted, the smallest `v` of each key. */
function expected(records: Rec[]): Rec[] {
  const best = new Map<string, Rec>();
  for (const r of records) if (!best.has(r.k) || best.get(r.k)!.v > r.v) best.set(r.k, r);
  return [...best.values()].sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0));
}

async function through(records: Rec[], runRecords?: number): Promise<{ out: Rec[]; spilled: boolean }> {
  const spill = new SortedSpill<Rec>(order(runRecords));
  try {
    for (const r of records) await spill.add(r, r.k.length + 16);
    const spilled = spill.folder !== null;
    const out: Rec[] = [];
    for await (const r of spill.sorted()) out.push(r);
    return { out, spilled };
  } finally {
    await spill.close();
  }
}

t.test('fits one run: sorted in memory, nothing written', async (t) => {
  const records = ['b', 'a', 'c', 'a', 'b'].map((k, v) => ({ k, v }));
  const { out, spilled } = await through(records);
  t.same(out, expected(records));
  t.notOk(spilled, 'no run file');
});

t.test('many runs: merged in order, duplicates across runs dropped, the first kept', async (t) => {
  const records = Array.from({ length: 5000 }, (_, v) => ({ k: `key-${(v * 7919) % 1300}`, v }));
  // 10 records a run: 500 runs, merged 64 at a time and then once more.
  const { out, spilled } = await through(records, 10);
  t.ok(spilled, 'runs were written');
  t.same(out, expected(records));
});

t.test('property: any records, any run size, the same as sorting in memory', async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.record({ k: fc.string({ maxLength: 6 }), v: fc.nat() }), { maxLength: 300 }),
      fc.integer({ min: 1, max: 40 }),
      async (raw, run) => {
        const records = raw.map((r, i) => ({ k: r.k, v: i }));
        const { out } = await through(records, run);
        t.same(out, expected(records));
        return true;
      },
    ),
    { numRuns: 60 },
  );
});

t.test('close removes the run files, also when they were never read', async (t) => {
  const spill = new SortedSpill<Rec>(order(2));
  for (let v = 0; v < 10; v++) await spill.add({ k: String(v), v }, 8);
  const folder = spill.folder!;
  t.ok(readdirSync(folder).length > 0, 'runs were written');
  t.equal(path.dirname(folder), os.tmpdir(), 'under the system temporary folder');
  await spill.close();
  t.notOk(existsSync(folder), 'its folder is gone');
});
