/**
 * The merge of an incremental backup, without a server: documents read from the head of their JSON
 * text as JSON.parse reads them (escapes, a name that spells the orderKey key), the export order of
 * decisions.md D1 (byte-wise, a prefix first, ties by id), and a merged body framed as a full export.
 */
import t from 'tap';
import { before, mergedBody, rawDocument, type RawDocument } from '../../src/backup/merge.js';

const text = (d: Record<string, unknown>) =>
  JSON.stringify({
    id: d.id,
    slug: 's',
    name: d.name ?? 'n',
    type: 'document',
    parentId: null,
    orderKey: d.orderKey,
    tags: ['x'],
  });

t.test('id and orderKey as JSON.parse reads them', async (t) => {
  for (const [i, d] of [
    { id: 'd1', orderKey: 'a1' },
    { id: 'd"2\\', orderKey: 'a\\"b' },
    { id: 'é\u2028', orderKey: 'Zz', name: 'a name with ,"orderKey":"x" inside' },
  ].entries()) {
    const r = rawDocument(Buffer.from(text(d)));
    // The names are plain: a U+2028 in an assertion's name would break the TAP stream.
    t.same([r.id, r.key.toString()], [d.id, `${d.orderKey}\u0000${d.id}`], `document ${i}`);
  }
  const odd = rawDocument(Buffer.from('{"slug":"s","orderKey":"k","id":"late"}'));
  t.equal(odd.id, 'late', 'another field order is parsed in full');
  t.throws(() => rawDocument(Buffer.from('{"id":"x"}')), /without a string id and orderKey/);
});

t.test('the export order: byte-wise, a prefix first, ties by id (D1)', async (t) => {
  const d = (id: string, orderKey: string) => rawDocument(Buffer.from(text({ id, orderKey })));
  t.ok(before(d('z', 'Zz'), d('a', 'a0')), '"Zz" < "a0"');
  t.ok(before(d('z', 'a'), d('a', 'a0')), 'a prefix first');
  t.ok(before(d('a', 'b'), d('b', 'b')), 'ties by id');
  t.ok(before(d('a', 'b'), d('ab', 'b')), 'ties by id, a prefix first');
  t.ok(before(d('x', 'z'), d('x', 'é')), 'UTF-8 bytes, not code points of a locale');
});

async function* from(docs: RawDocument[]) {
  yield* docs;
}

t.test('a merged body: old minus dropped, changed inserted in order, framed as a full export', async (t) => {
  const d = (id: string, orderKey: string, name = 'n') => rawDocument(Buffer.from(text({ id, orderKey, name })));
  const old = [d('d1', 'a1'), d('d2', 'a2'), d('d3', 'a3'), d('d4', 'a4')];
  const changed = [d('n0', 'a0'), d('d4', 'a25', 'moved'), d('d2', 'a2', 'renamed'), d('n9', 'a9')].sort((a, b) =>
    Buffer.compare(a.key, b.key),
  );
  const drop = new Set(['d3', ...changed.map((c) => c.id)]);
  const book = Buffer.from('{"id":"b"}');
  for (const format of ['json', 'ndjson'] as const) {
    const chunks: Buffer[] = [];
    for await (const c of mergedBody({
      format,
      book,
      old: from(old),
      changed: from(changed),
      drop: (id) => drop.has(id),
    }))
      chunks.push(c);
    const body = Buffer.concat(chunks).toString();
    const want = [d('n0', 'a0'), d('d1', 'a1'), d('d2', 'a2', 'renamed'), d('d4', 'a25', 'moved'), d('n9', 'a9')].map(
      (x) => x.raw.toString(),
    );
    t.equal(
      body,
      format === 'json'
        ? `{"success":true,"book":{"id":"b"},"documents":[${want.join(',')}],"meta":{"count":5}}`
        : `{"success":true,"book":{"id":"b"}}\n${want.map((w) => `${w}\n`).join('')}{"meta":{"count":5}}\n`,
      format,
    );
  }
  const unordered = mergedBody({
    format: 'json',
    book,
    old: from([old[1]!, old[0]!]),
    changed: from([]),
    drop: () => false,
  });
  await t.rejects(async () => {
    for await (const _ of unordered);
  }, /out of export order/);
});
