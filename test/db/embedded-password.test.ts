/**
 * The embedded server's password file against the user it belongs to. As root, the data folder is
 * the postgres user's, who can rename anything in it at any moment. strace holds kb-export (a child
 * process running the built module) for a second at the system calls where a swap would matter,
 * and the postgres user then swaps the file being read or written for a link to a file of root's;
 * what was read, what became of root's file and what is left behind are asserted. Needs root, the
 * postgres user and strace; the child runs dist/ (npm test builds it).
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { readPassword, withPasswordFile } from '../../src/db/embedded-password.js';
import { ROOT } from '../helpers/paths.js';

const MODULE = path.join(ROOT, 'dist/src/db/embedded-password.js');
// As documented in the README (KB_DATA_DIR).
const PASSWORD_FILE = 'kb-export-password';
/** How long strace holds a call: ample time for the swap, which starts when the call is shown. */
const HOLD_US = 1_000_000;

const isRoot = process.getuid!() === 0;
const hasStrace = spawnSync('strace', ['-V']).status === 0;
const hasPostgresUser = spawnSync('id', ['-u', 'postgres']).status === 0;
const skip =
  (!isRoot && 'needs root') || (!hasPostgresUser && 'needs the postgres user') || (!hasStrace && 'needs strace');

function postgresOwner(): { uid: number; gid: number } {
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

function freshPath(t: Test, prefix: string): string {
  const p = path.join(os.tmpdir(), `${prefix}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => fs.rm(p, { recursive: true, force: true }));
  return p;
}

/** A data folder as the server leaves it: the postgres user's, 0700. */
async function postgresDataDir(t: Test): Promise<string> {
  const dir = freshPath(t, 'kbx-password-data');
  await fs.mkdir(dir, { mode: 0o700 });
  const owner = postgresOwner();
  await fs.chown(dir, owner.uid, owner.gid);
  return dir;
}

/** A file only root may read, elsewhere, shaped like a password so that nothing but a check refuses it. */
async function rootSecret(
  t: Test,
): Promise<{ file: string; state: () => Promise<{ uid: number; mode: number; text: string }> }> {
  const dir = freshPath(t, 'kbx-root-only');
  await fs.mkdir(dir, { mode: 0o700 });
  const file = path.join(dir, 'secret');
  await fs.writeFile(file, 'RootOnlySecret0123456789abcdef\n', { mode: 0o600 });
  const state = async () => {
    const st = await fs.stat(file);
    return { uid: st.uid, mode: st.mode & 0o7777, text: await fs.readFile(file, 'utf8') };
  };
  return { file, state };
}

/** Runs a command as the postgres user; throws when it fails. */
function asPostgres(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { ...postgresOwner(), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} as postgres: ${r.stderr}`);
}

/**
 * Runs `body` (module code with `mod`, the built embedded-password.js, in scope; it prints one
 * line of JSON) in a child process under strace `filter`, which holds the calls it matches.
 * `swap` runs, once, as soon as strace shows a held call matching `when`.
 */
async function runHeld(
  body: string,
  filter: string[],
  when: RegExp,
  swap: () => void,
): Promise<{ result: Record<string, unknown>; swapped: boolean }> {
  const script = `const mod = await import(${JSON.stringify(MODULE)});\n${body}`;
  const env = { ...process.env };
  delete env.NODE_OPTIONS; // tap's hooks would add thousands of calls to trace
  // strace writes to its stderr, which the child's own (unused) stderr shares.
  const child = spawn('strace', ['-f', '-qq', ...filter, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env,
  });
  let trace = '';
  let out = '';
  let swapped = false;
  child.stderr.on('data', (d: Buffer) => {
    trace += d.toString();
    if (!swapped && when.test(trace)) {
      swapped = true;
      swap();
    }
  });
  child.stdout.on('data', (d: Buffer) => (out += d));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`the child exited with ${code}: ${out}\n${trace.slice(-2000)}`);
  return { result: JSON.parse(out.trim().split('\n').pop()!) as Record<string, unknown>, swapped };
}

const PRINT = (call: string) => `
try { console.log(JSON.stringify({ value: await ${call} ?? null })); }
catch (err) { console.log(JSON.stringify({ error: err.message })); }`;

t.before(() => {
  if (!skip && !existsSync(MODULE)) throw new Error(`${MODULE} is missing: run \`npm run build\` first`);
});

t.test('a link swapped in while the password is read is not followed', { skip }, async (t) => {
  const owner = postgresOwner();
  const dataDir = await postgresDataDir(t);
  const file = path.join(dataDir, PASSWORD_FILE);
  const genuine = 'GenuinePassword0123456789';
  await fs.writeFile(file, `${genuine}\n`, { mode: 0o600 });
  await fs.chown(file, owner.uid, owner.gid);
  const secret = await rootSecret(t);
  const before = await secret.state();
  const planted = path.join(dataDir, 'planted');
  asPostgres('ln', ['-s', secret.file, planted]);

  // Every call naming the password file, or on a descriptor of it, is held after it returned:
  // the first one, a check or the open, is when the postgres user swaps the file for the link.
  const calls = '%file,%fstat';
  const { result, swapped } = await runHeld(
    PRINT(`mod.readPassword(${JSON.stringify(dataDir)}, ${JSON.stringify(owner)})`),
    ['-P', file, '-e', `trace=${calls}`, '-e', `inject=${calls}:delay_exit=${HOLD_US}`],
    new RegExp(`"${file}"`),
    () => asPostgres('mv', ['-T', planted, file]),
  );
  t.ok(swapped, 'the file was swapped for the link while it was being read');
  t.same(result, { value: genuine }, "what was read is the file that was opened and checked, not root's");
  t.same(await secret.state(), before, "root's file is as it was");
  await t.rejects(
    readPassword(dataDir, owner),
    { name: 'UnsafePathError', message: `refusing to use ${file}: it is a symbolic link` },
    'the link itself is refused',
  );
});

t.test(
  "a link swapped in while the password is written: root's file is not chowned, and the swap is reported",
  { skip },
  async (t) => {
    const owner = postgresOwner();
    const dataDir = await postgresDataDir(t);
    const file = path.join(dataDir, PASSWORD_FILE);
    const secret = await rootSecret(t);
    const before = await secret.state();
    const planted = path.join(dataDir, 'planted');
    asPostgres('ln', ['-s', secret.file, planted]);

    // The temporary file's ownership is given to the postgres user while kb-export holds it open;
    // strace holds that call before it runs, and the postgres user swaps the temporary file then.
    const calls = 'chown,fchown,lchown,fchownat';
    const { result, swapped } = await runHeld(
      PRINT(`mod.writePassword(${JSON.stringify(dataDir)}, 'NewPassword0123456789', ${JSON.stringify(owner)})`),
      ['-e', `trace=${calls}`, '-e', `inject=${calls}:delay_enter=${HOLD_US}`],
      /chown/,
      () => {
        const tmp = readdirSync(dataDir).find((name) => name.startsWith(`${PASSWORD_FILE}.`));
        if (!tmp) throw new Error(`no temporary file in ${dataDir}: ${readdirSync(dataDir).join(', ')}`);
        asPostgres('mv', ['-T', planted, path.join(dataDir, tmp)]);
      },
    );
    t.ok(swapped);
    t.same(await secret.state(), before, "root's file keeps its owner, mode and content");
    t.same(result, { error: `refusing to use ${file}: something else was put in its place while it was written` });
    t.same(readdirSync(dataDir), [PASSWORD_FILE], 'no temporary file is left');
    t.ok((await fs.lstat(file)).isSymbolicLink(), "the postgres user's link is where the rename put it");
    await t.rejects(
      readPassword(dataDir, owner),
      { message: `refusing to use ${file}: it is a symbolic link` },
      'and is refused at the next start',
    );
  },
);

t.test(
  "initdb's password file lies in a folder of root's that the postgres user can only search",
  { skip },
  async (t) => {
    const owner = postgresOwner();
    let folder = '';
    await withPasswordFile('InitdbPassword0123456789', owner, async (file) => {
      folder = path.dirname(file);
      const dir = await fs.lstat(folder);
      const st = await fs.lstat(file);
      t.same(
        [dir.uid, dir.gid, dir.mode & 0o7777],
        [0, owner.gid, 0o710],
        "the folder is root's, searchable by the postgres group",
      );
      t.same([st.uid, st.mode & 0o7777], [owner.uid, 0o600], "the file is the postgres user's, 0600");
      const read = spawnSync('cat', [file], { ...owner, encoding: 'utf8' });
      t.equal(read.stdout, 'InitdbPassword0123456789\n', 'the postgres user reads it');
      const plant = spawnSync('ln', ['-s', '/etc/shadow', path.join(folder, 'planted')], {
        ...owner,
        encoding: 'utf8',
      });
      t.not(plant.status, 0, 'but can put nothing in its folder');
    });
    t.notOk(existsSync(folder), 'the folder is removed afterwards');
  },
);
