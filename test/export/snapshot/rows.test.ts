/**
 * A row's document id as the plan writer reads it from the head's JSON (src/export/snapshot/rows.ts):
 * the id JSON.parse gives, for plain, non-ASCII and escaped ids, read from PostgreSQL's own to_json.
 */
import t from 'tap';
import { documentIdOf, type DocumentRow } from '../../../src/export/snapshot/rows.js';
import { createTestDatabase } from '../../helpers/db.js';

const db = await createTestDatabase(t);

const IDS = ['d1', 'doc-ü-中文-😀', 'a"quote', 'back\\slash', 'tab\there', 'nl\nx', 'ctl\u0001', 'end\\', '"', ''];

t.test('every id read back from its to_json head as JSON.parse reads it', async (t) => {
  for (const id of IDS) {
    const [row] = await db.sql<
      { head: string }[]
    >`SELECT '{"id":' || to_json(${id}::text)::text || ',"slug":"s"' AS head`;
    const head = Buffer.from(row!.head);
    const docRow = [head, null, null, null, null, null] as DocumentRow;
    t.equal(documentIdOf(docRow), id, JSON.stringify(id));
  }
});
