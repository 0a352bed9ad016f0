/**
 * The embedded server's superuser password. The server listens on 127.0.0.1, which every local
 * user can reach, so the password is random per data folder (24 bytes from crypto.randomBytes),
 * kept in <dataDir>/kb-export-password: a 0600 file owned by the user the server runs as, inside
 * the 0700 data folder, reused on every later start of that folder.
 *
 * Folders initialised before the file existed have the old fixed password 'kb-export'. For
 * them a new random password is written to the file before the server starts; once it runs,
 * settlePassword logs in with the file's password and, only when that is refused, with the old
 * one to ALTER the superuser to the file's. Whatever point a start is interrupted at, the next
 * start finishes the switch, and no folder keeps accepting the old password once started.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { checkOwned, PRIVATE, type Owner } from './owned-paths.js';

/** The password's file inside the data folder; its name is documented (README, KB_DATA_DIR). */
const PASSWORD_FILE = 'kb-export-password';

/** What kb-export set before passwords were random; only ever used to replace it. */
const LEGACY_PASSWORD = 'kb-export';

/** A new random password; base64url, so it needs no quoting in SQL or in a URL. */
export function newPassword(): string {
  return randomBytes(24).toString('base64url');
}

/**
 * The password in `dataDir`'s file, or undefined when there is none. Throws UnsafePathError when
 * the file is a symbolic link, not owned by `owner` or readable by anyone else.
 */
export async function readPassword(dataDir: string, owner: Owner): Promise<string | undefined> {
  const file = path.join(dataDir, PASSWORD_FILE);
  try {
    await checkOwned(file, 'file', owner.uid, PRIVATE);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const password = (await fs.readFile(file, 'utf8')).trim();
  if (!/^[A-Za-z0-9_-]{16,}$/.test(password)) throw new Error(`${file} does not hold a kb-export password`);
  return password;
}

/** Writes `password` to `dataDir`'s file (0600, owned by `owner`), replacing it atomically. */
export async function writePassword(dataDir: string, password: string, owner: Owner): Promise<void> {
  await writeSecret(path.join(dataDir, PASSWORD_FILE), password, owner);
}

async function writeSecret(file: string, password: string, owner: Owner): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await fs.rm(tmp, { force: true });
  await fs.writeFile(tmp, `${password}\n`, { mode: 0o600, flag: 'wx' });
  if (owner.uid !== process.getuid?.()) await fs.chown(tmp, owner.uid, owner.gid);
  await fs.rename(tmp, file);
}

/**
 * Runs `fn` with the path of a file holding `password` that only `owner` (and root) can read, in
 * a private temporary folder removed afterwards: initdb's --pwfile, which must be readable by the
 * postgres user but by no one else.
 */
export async function withPasswordFile<T>(password: string, owner: Owner, fn: (file: string) => Promise<T>): Promise<T> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'kb-export-initdb-'));
  try {
    if (owner.uid !== process.getuid?.()) await fs.chown(dir, owner.uid, owner.gid);
    const file = path.join(dir, 'pwfile');
    await writeSecret(file, password, owner);
    return await fn(file);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/**
 * Makes the running server on 127.0.0.1:`port` accept `password` for `postgres`, switching from
 * the legacy password if needed. Throws when it accepts neither, naming `dataDir`.
 */
export async function settlePassword(port: number, password: string, dataDir: string): Promise<void> {
  if (await login(port, password)) return;
  const switched = await login(port, LEGACY_PASSWORD, (sql) => sql.unsafe(`ALTER ROLE postgres PASSWORD '${password}'`));
  if (switched) return;
  throw new Error(
    `the embedded PostgreSQL in ${dataDir} accepts neither the password in ${path.join(dataDir, PASSWORD_FILE)} ` +
      `nor the one kb-export used before; if the folder holds nothing you need (say, its first start was ` +
      `interrupted), remove it; otherwise set a password in single-user mode and write it to that file`,
  );
}

/** Whether `password` logs in; runs `then` on that session when it does. */
async function login(port: number, password: string, then?: (sql: postgres.Sql) => Promise<unknown>): Promise<boolean> {
  const sql = postgres({ host: '127.0.0.1', port, user: 'postgres', password, database: 'postgres', max: 1, onnotice: () => {} });
  try {
    await sql`SELECT 1`;
    if (then) await then(sql);
    return true;
  } catch (err) {
    if ((err as { code?: string }).code === '28P01') return false;
    throw err;
  } finally {
    await sql.end({ timeout: 1 });
  }
}
