/**
 * A property over random histories (decisions.md D12.2, D12.3): writes of every kind, some in a
 * transaction that takes its id early and commits (or rolls back) after later writes and exports,
 * interleaved with exports. At every export, for both excludeCategories and both knowledge bases,
 * the delta since each earlier export, read in the new export's snapshot and applied to the
 * earlier export (changed documents replace or join by id, removed ids go), gives exactly the new
 * export, in order; the delta's documents come in export order and no removed id is in the export.
 */
import { deepStrictEqual, ok } from 'node:assert';
import fc from 'fast-check';
import t from 'tap';
import type { Sql } from '../../../src/db/connect.js';
import type { ReservedSql } from 'postgres';
import { changedDocumentQuery, removedQuery } from '../../../src/export/snapshot/changes-query.js';
import { documentQuery } from '../../../src/export/snapshot/query.js';
import { createTestDatabase } from '../../helpers/db.js';
import { applyDelta, type DeltaRead } from '../../helpers/changes.js';
import { documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';

const DOCS = 6;
const OPS = [
  'create',
  'createCategory',
  'rename',
  'html',
  'autosave',
  'sameValues',
  'delete',
  'recreate',
  'inactivate',
  'activate',
  'toCategory',
  'toDocument',
  'moveAway',
  'moveBack',
  'reorder',
] as const;
type Op = (typeof OPS)[number];

type Step =
  | { kind: 'write'; op: Op; doc: number; key: string; inWriter: boolean }
  | { kind: 'begin' }
  | { kind: 'end'; commit: boolean }
  | { kind: 'export' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('write' as const),
      op: fc.constantFrom(...OPS),
      doc: fc.integer({ min: 0, max: DOCS - 1 }),
      key: fc.constantFrom('a', 'b', 'b0', 'c', 'Z', 'a0'),
      inWriter: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'begin' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('end' as const), commit: fc.boolean() }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'export' as const }) },
);

type RowText = (string | null)[];
/** One export: its snapshot and, per book and option, its rows by id in export order. */
interface Export {
  snapshot: string;
  rows: Map<string, Map<string, RowText>>;
}

const OPTIONS = [false, true].map((excludeCategories) => ({ excludeCategories, includeContentHtml: true }));
const text = (r: DocumentRow): RowText => r.map((c) => (c === null ? null : c.toString()));

/** The statements of one write on `exec`; `a` and `b` are the run's books, `id` the document. */
async function write(exec: Sql | ReservedSql, op: Op, id: string, a: string, b: string, key: string): Promise<void> {
  const insert = (type: string) =>
    exec`INSERT INTO documents (id, book_id, slug, name, type, order_key, status, content_html)
         VALUES (${id}, ${a}, ${id}, ${id}, ${type}, ${key}, 1, '<p>x</p>') ON CONFLICT (id) DO NOTHING`;
  switch (op) {
    case 'create':
      return void (await insert('document'));
    case 'createCategory':
      return void (await insert('category'));
    case 'rename':
      return void (await exec`UPDATE documents SET name = name || 'r' WHERE id = ${id}`);
    case 'html':
      return void (await exec`UPDATE documents SET content_html = content_html || '<i>h</i>' WHERE id = ${id}`);
    case 'autosave':
      return void (await exec`UPDATE documents SET content_yjs = ${Buffer.from(key)}, content_json = ${exec.json({ key })} WHERE id = ${id}`);
    case 'sameValues':
      return void (await exec`UPDATE documents SET name = name, status = status, content_html = content_html WHERE id = ${id}`);
    case 'delete':
      return void (await exec`DELETE FROM documents WHERE id = ${id}`);
    case 'recreate': {
      const rows = await exec`DELETE FROM documents WHERE id = ${id} RETURNING *`;
      if (rows[0]) await exec`INSERT INTO documents ${exec(rows[0])}`;
      return;
    }
    case 'inactivate':
      return void (await exec`UPDATE documents SET status = 0 WHERE id = ${id}`);
    case 'activate':
      return void (await exec`UPDATE documents SET status = 1 WHERE id = ${id}`);
    case 'toCategory':
      return void (await exec`UPDATE documents SET type = 'category' WHERE id = ${id}`);
    case 'toDocument':
      return void (await exec`UPDATE documents SET type = 'document' WHERE id = ${id}`);
    case 'moveAway':
      return void (await exec`UPDATE documents SET book_id = ${b} WHERE id = ${id}`);
    case 'moveBack':
      return void (await exec`UPDATE documents SET book_id = ${a} WHERE id = ${id}`);
    case 'reorder':
      return void (await exec`UPDATE documents SET order_key = ${key} WHERE id = ${id}`);
  }
}

const rowsKey = (book: string, excludeCategories: boolean) => `${book}/${excludeCategories}`;

/**
 * Reads an export of both books with both options in one snapshot and checks, in that snapshot,
 * the delta since each earlier export against it.
 */
async function exportAndCheck(sql: Sql, books: string[], earlier: Export[]): Promise<Export> {
  return sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => {
    const [s] = await tx<{ snapshot: string }[]>`SELECT pg_current_snapshot()::text AS snapshot`;
    const rows = new Map<string, Map<string, RowText>>();
    for (const book of books) {
      for (const opts of OPTIONS) {
        const read = (await tx.unsafe(documentQuery(opts), [book]).raw()) as unknown as DocumentRow[];
        rows.set(rowsKey(book, opts.excludeCategories), new Map(read.map((r) => [documentIdOf(r), text(r)])));
      }
    }
    for (const [j, before] of earlier.entries()) {
      for (const book of books) {
        for (const opts of OPTIONS) {
          const key = rowsKey(book, opts.excludeCategories);
          const changed = (await tx
            .unsafe(changedDocumentQuery(opts), [book, before.snapshot, '{}'])
            .raw()) as unknown as DocumentRow[];
          const removed = (
            (await tx.unsafe(removedQuery(opts), [book, before.snapshot, '{}']).raw()) as unknown as [Buffer][]
          ).map((r) => JSON.parse(r[0].toString()) as string);
          const delta: DeltaRead = {
            documents: changed.map(documentIdOf),
            removed,
            rows: new Map(changed.map((r) => [documentIdOf(r), text(r)])),
          };
          const now = rows.get(key)!;
          const where = `${key}, delta since export ${j}`;
          deepStrictEqual(
            [...applyDelta(before.rows.get(key)!, delta)],
            [...now],
            `${where}: applied, it gives the export`,
          );
          const order = [...now.keys()];
          deepStrictEqual(
            delta.documents,
            order.filter((id) => delta.rows.has(id)),
            `${where}: documents in export order`,
          );
          ok(
            removed.every((id) => !now.has(id)),
            `${where}: no removed id is in the export`,
          );
          deepStrictEqual(
            removed,
            [...new Set(removed)].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))),
            `${where}: removed ids once each, sorted`,
          );
        }
      }
    }
    return { snapshot: s!.snapshot, rows };
  });
}

t.test('applying a delta to an earlier export gives the later export, over random histories', async (t) => {
  const { sql } = await createTestDatabase(t);
  await sql`INSERT INTO users (id, name) VALUES ('u', 'u')`;
  let run = 0;
  let checked = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 30 }), async (steps) => {
      const r = run++;
      const [a, b] = [`p${r}-a`, `p${r}-b`];
      await sql`INSERT INTO books (id, owner_id, slug, name) VALUES (${a}, 'u', ${a}, 'A'), (${b}, 'u', ${b}, 'B')`;
      for (let i = 0; i < DOCS; i += 2) await write(sql, 'create', `p${r}-d${i}`, a, b, `k${i}`);
      let writer: ReservedSql | undefined;
      /** Whether the writer has written: everything goes through it until it ends (no waits on its locks). */
      let holding = false;
      const exports: Export[] = [await exportAndCheck(sql, [a, b], [])];
      try {
        for (const s of steps) {
          if (s.kind === 'begin' && !writer) {
            writer = await sql.reserve();
            await writer`BEGIN`;
            await writer`SELECT pg_current_xact_id()`;
          } else if (s.kind === 'end' && writer) {
            await (s.commit ? writer`COMMIT` : writer`ROLLBACK`);
            writer.release();
            writer = undefined;
            holding = false;
          } else if (s.kind === 'write') {
            const exec = writer && (holding || s.inWriter) ? writer : sql;
            if (exec === writer) holding = true;
            await write(exec, s.op, `p${r}-d${s.doc}`, a, b, s.key);
          } else if (s.kind === 'export') {
            exports.push(await exportAndCheck(sql, [a, b], exports));
            checked++;
          }
        }
        if (writer) await writer`COMMIT`;
      } finally {
        writer?.release();
      }
      await exportAndCheck(sql, [a, b], exports);
      checked++;
    }),
    { numRuns: 40 },
  );
  t.ok(checked >= 40, `${checked} exports checked against every earlier one`);
});
