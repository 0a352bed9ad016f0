/**
 * The raw splitter of incremental backups and the change feed: every part comes back as the exact
 * bytes it had in the body, whatever the pieces the body arrives in (one byte at a time, every cut
 * point), for JSON and NDJSON, full exports and deltas; a cut body is refused.
 */
import t from 'tap';
import { RawExportSplitter } from '../../src/backup/raw-split.js';

const book = '{"id":"b","slug":"kb","name":"K \\"B\\" {[","description":null}';
const docs = [
  '{"id":"d1","orderKey":"a1","name":"with \\\\ and \\" and } ] , :","tags":["x","y"],"cover":{"url":"/m/1.png","position":"center"},"n":-1.5e3}',
  '{"id":"d2","orderKey":"a2","name":"\\u00e9\\n","tags":null,"cover":null,"contentHtml":"<p>{\\"a\\":[1]}</p>"}',
  '{"id":"d\\"3","orderKey":"a3","deep":[[{"a":[{}]}],[]],"t":true,"f":false}',
];
const removed = ['r1', 'r "2"'];

const json = (d: string[], r: string[] | null) =>
  `{"success":true,"book":${book},"documents":[${d.join(',')}]${r === null ? '' : `,"removed":[${r.map((x) => JSON.stringify(x)).join(',')}]`},"meta":{"count":${d.length}}}`;
const ndjson = (d: string[], r: string[]) =>
  `{"success":true,"book":${book}}\n${d.map((x) => `${x}\n`).join('')}${r.map((x) => `{"removed":${JSON.stringify(x)}}\n`).join('')}{"meta":{"count":${d.length}}}\n`;

function split(format: 'json' | 'ndjson', pieces: Buffer[]) {
  const got = { book: [] as string[], documents: [] as string[], removed: [] as string[], count: -1 };
  const s = new RawExportSplitter(format, {
    book: (raw) => got.book.push(raw.toString()),
    document: (raw) => got.documents.push(raw.toString()),
    removed: (id) => got.removed.push(id),
  });
  for (const p of pieces) s.write(p);
  got.count = s.end();
  return got;
}

const cuts = (body: Buffer) => [
  [body],
  [...body].map((b) => Buffer.from([b])),
  ...Array.from({ length: body.length - 1 }, (_, i) => [body.subarray(0, i + 1), body.subarray(i + 1)]),
];

for (const [what, format, text, r] of [
  ['a full JSON export', 'json', json(docs, null), []],
  ['a JSON delta', 'json', json(docs, removed), removed],
  ['a full NDJSON export', 'ndjson', ndjson(docs, []), []],
  ['an NDJSON delta', 'ndjson', ndjson(docs, removed), removed],
] as const) {
  t.test(`${what}: the parts as written, whatever the pieces`, async (t) => {
    const body = Buffer.from(text);
    let same = true;
    for (const pieces of cuts(body)) {
      const got = split(format, pieces);
      same &&=
        JSON.stringify(got) === JSON.stringify({ book: [book], documents: docs, removed: r, count: docs.length });
    }
    t.ok(same, 'every cut gives the same parts');
    for (const at of [body.length - 1, body.length >> 1, 30]) {
      const s = new RawExportSplitter(format, { book() {}, document() {}, removed() {} });
      s.write(body.subarray(0, at));
      t.throws(() => s.end(), /cut short|newline/, `cut at ${at}: refused`);
    }
  });
}

t.test('an empty export and a body that is not a successful export', async (t) => {
  t.same(split('json', [Buffer.from(json([], null))]).count, 0);
  const s = new RawExportSplitter('json', { book() {}, document() {}, removed() {} });
  t.throws(() => s.write(Buffer.from('{"success":false,"book":{}}')), /success/);
  const n = new RawExportSplitter('ndjson', { book() {}, document() {}, removed() {} });
  t.throws(() => n.write(Buffer.from('{"success":false}\n')), /first line/);
});
