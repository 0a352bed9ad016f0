/**
 * A fresh, migrated database per test file on the server at DATABASE_URL (set by test/run.ts:
 * an embedded PostgreSQL unless the caller set one), dropped when the test ends.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { connect, type Sql } from '../../src/db/connect.js';
import { migrate } from '../../src/db/migrate.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export function serverUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`');
  return url;
}

/** URL of database `name` on the test server. */
export function databaseUrl(name: string): string {
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  return u.toString();
}

export interface TestDatabase {
  name: string;
  url: string;
  sql: Sql;
}

/** Creates and migrates `kbx_test_<random>`; drops it (closing every connection) at teardown. */
export async function createTestDatabase(t: Teardown, opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const name = `kbx_test_${randomBytes(5).toString('hex')}`;
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = databaseUrl(name);
  const sql = connect(url, { max: 10, applicationName: 'kbx-test' });
  if (opts.migrate !== false) await migrate(sql);
  t.teardown(async () => {
    await sql.end({ timeout: 1 });
    const a = postgres(serverUrl(), { max: 1, onnotice: () => {} });
    await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await a.end();
  });
  return { name, url, sql };
}

/**
 * Holds ACCESS EXCLUSIVE on `documents` (a schema change in progress) on a connection of its own
 * until the returned release() or the test's end.
 */
export async function lockDocuments(t: Teardown, sql: Sql): Promise<() => Promise<void>> {
  const reserved = await sql.reserve();
  await reserved`BEGIN`;
  await reserved`LOCK TABLE documents IN ACCESS EXCLUSIVE MODE`;
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    await reserved`ROLLBACK`.catch(() => {});
    reserved.release();
  };
  t.teardown(release);
  return release;
}
