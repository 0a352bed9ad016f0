/**
 * The databases bench/write-cost.ts compares: migrated up to 0001 (no trigger), 0002 and 0003, 0003
 * with the statement-level UPDATE trigger it was chosen over, 0006 (0003 plus the change
 * tracking for deltas), 0007 (0006 plus the last change but for content_html, indexed), 0009
 * (0007 plus the export text, sql/0009_export_text.sql) and 0010 (0009 plus the bodies' export text,
 * sql/0010_export_body_text.sql), and 0010 with pglz where it chose lz4.
 */
import { copyFile, mkdtemp, readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// The package's sql/ folder, from bench/lib/ (the tests import this source) or dist/bench/lib/.
const ROOT = HERE.split(path.sep).includes('dist') ? path.join(HERE, '..', '..', '..') : path.join(HERE, '..', '..');
const MIGRATIONS = path.join(ROOT, 'sql');

/** Columns the export reads: sql/0003_export_version_random.sql compares exactly these. */
const EXPORTED = [
  'id',
  'book_id',
  'slug',
  'name',
  'type',
  'parent_id',
  'order_key',
  'status',
  'description',
  'emoji_info',
  'cover_url',
  'cover_position',
  'tags',
  'theme_id',
  'background_theme_id',
  'body_font_size',
  'created_at',
  'updated_at',
  'content_str',
  'content_html',
];
const row = (alias: string) => `(${EXPORTED.map((c) => `${alias}.${c}`).join(', ')})`;

/**
 * The alternative to 0003's row-level UPDATE OF trigger: one statement-level trigger with transition
 * tables (as 0002 had) that compares every updated row's exported columns, matched by id. It
 * cannot have a column list, so an autosave compares content_str and content_html too.
 */
const STATEMENT_LEVEL_SQL = `
  CREATE FUNCTION kbx_bench_bump_from_document_updates() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    WITH changed AS (
      SELECT n.book_id AS new_book, o.book_id AS old_book
      FROM kbx_new_rows n FULL JOIN kbx_old_rows o ON o.id = n.id
      WHERE ${row('n')} IS DISTINCT FROM ${row('o')})
    UPDATE books SET export_version = kbx_export_version(id)
    WHERE id IN (SELECT new_book FROM changed UNION SELECT old_book FROM changed)
      AND export_version <> kbx_export_version(id);
    RETURN NULL;
  END $$;
  DROP TRIGGER documents_export_version_update ON documents;
  CREATE TRIGGER documents_export_version_update AFTER UPDATE ON documents
    REFERENCING OLD TABLE AS kbx_old_rows NEW TABLE AS kbx_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kbx_bench_bump_from_document_updates();`;

export interface Variant {
  name: string;
  what: string;
  /** Highest migration number applied. */
  upTo: number;
  extraSql?: string;
  /** Whether a content_yjs-only update moves the version; null: no version at all. */
  autosaveBumps: boolean | null;
  /** Whether removals are recorded (sql/0006_change_tracking.sql). */
  tracksChanges?: boolean;
}

export const VARIANTS: Variant[] = [
  { name: 'none', what: 'no trigger (migrations up to 0001)', upTo: 1, autosaveBumps: null },
  { name: '0002', what: 'counter, every document write bumps (up to 0002)', upTo: 2, autosaveBumps: true },
  {
    name: '0003',
    what: 'random, row-level UPDATE OF exported columns WHEN they differ (up to 0003)',
    upTo: 3,
    autosaveBumps: false,
  },
  {
    name: '0003-stmt',
    what: '0003 with a statement-level UPDATE trigger comparing every row',
    upTo: 3,
    extraSql: STATEMENT_LEVEL_SQL,
    autosaveBumps: false,
  },
  {
    name: '0006',
    what: '0003 plus the change tracking for deltas: changed_xid set by a BEFORE UPDATE OF … WHEN trigger and indexed, removals recorded (up to 0006)',
    upTo: 6,
    autosaveBumps: false,
    tracksChanges: true,
  },
  {
    name: '0007',
    what: '0006 plus changed_xid_no_html: a second comparison in the same trigger and a second index (up to 0007)',
    upTo: 7,
    autosaveBumps: false,
    tracksChanges: true,
  },
  {
    name: '0009',
    what: '0007 plus the export text: export_head and export_mid built by a BEFORE INSERT and UPDATE OF trigger from the columns they hold (up to 0009)',
    upTo: 9,
    autosaveBumps: false,
    tracksChanges: true,
  },
  {
    name: '0010',
    what: "0009 plus the bodies' export text: export_str and export_html, contentStr's and contentHtml's JSON, built by a BEFORE INSERT and UPDATE OF trigger of their own (up to 0010)",
    upTo: 10,
    autosaveBumps: false,
    tracksChanges: true,
  },
  {
    name: '0010-pglz',
    what: '0010 with the compression it was chosen over where the server has lz4: pglz, the default, for export_str and export_html',
    upTo: 10,
    extraSql:
      'ALTER TABLE documents ALTER COLUMN export_str SET COMPRESSION pglz, ALTER COLUMN export_html SET COMPRESSION pglz',
    autosaveBumps: false,
    tracksChanges: true,
  },
];

/**
 * A new temporary folder holding the migrations numbered up to `n`, for migrate(): a database as it
 * was before the later ones. The caller removes it.
 */
export async function migrationsUpTo(n: number): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kbx-migrations-'));
  for (const f of await readdir(MIGRATIONS)) {
    const num = /^(\d{4})_/.exec(f)?.[1];
    if (num !== undefined && Number(num) <= n) await copyFile(path.join(MIGRATIONS, f), path.join(dir, f));
  }
  return dir;
}
