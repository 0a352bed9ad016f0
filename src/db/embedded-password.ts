/** The embedded server's superuser password, random per data folder (docs/architecture.md). */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import fs, { type FileHandle } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { ensureSafeParents, openNoFollow, openOwnedFile, PRIVATE, UnsafePathError, type Owner } from './owned-paths.js';

/** Named in README (KB_DATA_DIR). */
const PASSWORD_FILE = 'kb-export-password';

/** Before passwords were random; only ever used to replace it. */
const LEGACY_PASSWORD = 'kb-export';

/** base64url: no quoting in SQL or in a URL. */
export function newPassword(): string {
  return randomBytes(24).toString('base64url');
}

/** More than any password kb-export writes: a bigger file is not one of ours. */
const MAX_PASSWORD_FILE = 1024;

/** Undefined when there is no file; UnsafePathError when it is not `owner`'s alone (openOwnedFile). */
export async function readPassword(dataDir: string, owner: Owner): Promise<string | undefined> {
  const file = path.join(dataDir, PASSWORD_FILE);
  let handle: FileHandle;
  try {
    handle = await openOwnedFile(file, owner.uid, PRIVATE);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  let text: string;
  try {
    const buf = Buffer.alloc(MAX_PASSWORD_FILE + 1);
    const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
    text = bytesRead > MAX_PASSWORD_FILE ? '' : buf.toString('utf8', 0, bytesRead);
  } finally {
    await handle.close();
  }
  const password = text.trim();
  if (!/^[A-Za-z0-9_-]{16,}$/.test(password)) throw new Error(`${file} does not hold a kb-export password`);
  return password;
}

/** Replaces the file atomically (0600, `owner`'s). */
export async function writePassword(dataDir: string, password: string, owner: Owner): Promise<void> {
  await writeSecret(path.join(dataDir, PASSWORD_FILE), password, owner);
}

/**
 * Through a temporary file (O_EXCL | O_NOFOLLOW) given its mode and owner on the handle: the folder
 * may be `owner`'s, who could swap a name for a link. Throws UnsafePathError if the rename was raced.
 */
async function writeSecret(file: string, password: string, owner: Owner): Promise<void> {
  const tmp = `${file}.${randomBytes(6).toString('hex')}.tmp`;
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;
  const handle = await openNoFollow(tmp, flags, 0o600);
  let renamed = false;
  try {
    await handle.writeFile(`${password}\n`);
    await handle.chmod(0o600);
    if (owner.uid !== process.getuid?.()) await handle.chown(owner.uid, owner.gid);
    await handle.sync();
    await fs.rename(tmp, file);
    renamed = true;
    const [written, placed] = await Promise.all([handle.stat(), fs.lstat(file)]);
    if (placed.ino !== written.ino || placed.dev !== written.dev) {
      throw new UnsafePathError(file, 'something else was put in its place while it was written');
    }
  } finally {
    await handle.close();
    // Only a name is removed: unlink follows no link.
    if (!renamed) await fs.rm(tmp, { force: true });
  }
}

/** initdb's --pwfile, in a temporary folder that stays ours, so nothing in it can be swapped or planted. */
export async function withPasswordFile<T>(
  password: string,
  owner: Owner,
  fn: (file: string) => Promise<T>,
): Promise<T> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'kb-export-initdb-'));
  try {
    await ensureSafeParents(dir);
    const me = process.getuid?.();
    if (owner.uid !== me) {
      const handle = await openNoFollow(dir, constants.O_RDONLY | constants.O_DIRECTORY);
      try {
        await handle.chown(me ?? 0, owner.gid);
        await handle.chmod(0o710);
      } finally {
        await handle.close();
      }
    }
    const file = path.join(dir, 'pwfile');
    await writeSecret(file, password, owner);
    return await fn(file);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/** Makes the server accept `password`, switching from the legacy one; throws when it takes neither. */
export async function settlePassword(port: number, password: string, dataDir: string): Promise<void> {
  if (await login(port, password)) return;
  const switched = await login(port, LEGACY_PASSWORD, (sql) =>
    sql.unsafe(`ALTER ROLE postgres PASSWORD '${password}'`),
  );
  if (switched) return;
  throw new Error(
    `the embedded PostgreSQL in ${dataDir} accepts neither the password in ${path.join(dataDir, PASSWORD_FILE)} ` +
      `nor the one kb-export used before; if the folder holds nothing you need (say, its first start was ` +
      `interrupted), remove it; otherwise set a password in single-user mode and write it to that file`,
  );
}

/** Whether `password` logs in; runs `then` on that session when it does. */
async function login(port: number, password: string, then?: (sql: postgres.Sql) => Promise<unknown>): Promise<boolean> {
  const sql = postgres({
    host: '127.0.0.1',
    port,
    user: 'postgres',
    password,
    database: 'postgres',
    max: 1,
    onnotice: () => {},
  });
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
