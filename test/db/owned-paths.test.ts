/**
 * The folders above a data folder, and files checked through the handle they are read from: real
 * folders, links and a FIFO in the temp folder. The embedded server's own refusals are in
 * embedded.test.ts; the swaps made while a file is in use in embedded-password.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { ensureSafeParents, openOwnedFile, PRIVATE } from '../../src/db/owned-paths.js';

function freshPath(t: Test, prefix: string): string {
  const p = path.join(os.tmpdir(), `${prefix}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => fs.rm(p, { recursive: true, force: true }));
  return p;
}

const mode = async (p: string) => (await fs.lstat(p)).mode & 0o7777;

t.test('missing folders above are created, only writable by us; the last name is left alone', async (t) => {
  const top = freshPath(t, 'kbx-parents');
  const dataDir = path.join(top, 'a', 'b', 'data');
  await ensureSafeParents(dataDir);
  for (const p of [top, path.join(top, 'a'), path.join(top, 'a', 'b')]) {
    const st = await fs.lstat(p);
    t.ok(
      st.isDirectory() && st.uid === process.getuid!() && (st.mode & 0o022) === 0,
      `${p} is ours, mode ${(st.mode & 0o777).toString(8)}`,
    );
  }
  await t.rejects(fs.lstat(dataDir), { code: 'ENOENT' });
  await ensureSafeParents(dataDir);
  t.pass('a second call finds them as they should be');
});

t.test('a sticky folder open to all (as /tmp) is accepted; one writable by its group is not', async (t) => {
  const top = freshPath(t, 'kbx-parents-modes');
  await fs.mkdir(path.join(top, 'shared'), { recursive: true });
  await fs.chmod(path.join(top, 'shared'), 0o1777);
  t.equal(await mode(path.join(top, 'shared')), 0o1777);
  await ensureSafeParents(path.join(top, 'shared', 'data'));

  await fs.mkdir(path.join(top, 'group'));
  await fs.chmod(path.join(top, 'group'), 0o770);
  await t.rejects(ensureSafeParents(path.join(top, 'group', 'x', 'data')), {
    name: 'UnsafePathError',
    message: `refusing to use ${path.join(top, 'group')}: its mode is 0770; a folder above ${path.join(top, 'group', 'x', 'data')} must not be writable by group or others unless it is sticky (as /tmp is)`,
  });
  await t.rejects(
    fs.lstat(path.join(top, 'group', 'x')),
    { code: 'ENOENT' },
    'nothing is created below a folder that fails',
  );
});

t.test('links on the way are followed, and the folders they lead to are checked too', async (t) => {
  const top = freshPath(t, 'kbx-parents-links');
  await fs.mkdir(path.join(top, 'real', 'open'), { recursive: true });
  await fs.chmod(path.join(top, 'real', 'open'), 0o777);
  await fs.mkdir(path.join(top, 'real', 'fine'));
  // Relative targets, with `..`, resolved from the link's own folder.
  await fs.symlink('real/fine', path.join(top, 'to-fine'));
  await fs.symlink('../real/open', path.join(top, 'real', 'to-open'));

  await ensureSafeParents(path.join(top, 'to-fine', 'new', 'data'));
  t.ok(
    (await fs.lstat(path.join(top, 'real', 'fine', 'new'))).isDirectory(),
    'a missing folder is made where the link leads',
  );

  const through = path.join(top, 'real', 'to-open', 'data');
  await t.rejects(ensureSafeParents(through), {
    message: `refusing to use ${path.join(top, 'real', 'open')}: its mode is 0777; a folder above ${through} must not be writable by group or others unless it is sticky (as /tmp is)`,
  });
});

t.test('a file is checked on the handle it is read from; a FIFO is refused, not waited on', async (t) => {
  const top = freshPath(t, 'kbx-owned-file');
  await fs.mkdir(top, { mode: 0o700 });
  const file = path.join(top, 'secret');
  await fs.writeFile(file, 'x', { mode: 0o600 });
  const handle = await openOwnedFile(file, process.getuid!(), PRIVATE);
  t.equal(await handle.readFile('utf8'), 'x');
  await handle.close();

  await fs.chmod(file, 0o640);
  await t.rejects(openOwnedFile(file, process.getuid!(), PRIVATE), {
    message: `refusing to use ${file}: its mode is 0640; group and others must have no access (0700)`,
  });
  const fifo = path.join(top, 'fifo');
  t.equal(spawnSync('mkfifo', ['-m', '600', fifo]).status, 0);
  await t.rejects(openOwnedFile(fifo, process.getuid!(), PRIVATE), {
    message: `refusing to use ${fifo}: it is not a file`,
  });
  const link = path.join(top, 'link');
  await fs.symlink(file, link);
  await t.rejects(openOwnedFile(link, process.getuid!(), PRIVATE), {
    message: `refusing to use ${link}: it is a symbolic link`,
  });
});
