/**
 * The root-only copy of the PostgreSQL binaries, for a postgres user that cannot reach the
 * checkout: made once, in a folder only root can write whose ancestors are checked too, and
 * refused rather than used when it or an ancestor could have been made or changed by another
 * user. Real files, the real binaries and the real postgres user, so most of it needs root.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { installedNativeBuild, runnableNativeDir, type NativeBuild } from '../../src/db/embedded-binaries.js';

const isRoot = process.getuid!() === 0;
const NOBODY = 65534;

t.test('without a separate server user, the installed binaries are used as they are', async (t) => {
  const build = installedNativeBuild();
  t.ok(existsSync(path.join(build.dir, 'bin', 'postgres')), build.dir);
  const missing = path.join(os.tmpdir(), `kbx-no-cache-${randomBytes(4).toString('hex')}`);
  t.equal(await runnableNativeDir(build, null, missing), build.dir);
  t.notOk(existsSync(missing), 'no cache folder made');
});

t.test(
  'binaries the postgres user cannot reach are copied once into a root-only folder',
  { skip: !isRoot && 'needs root' },
  async (t) => {
    const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
    const postgresUser = { uid: id('-u'), gid: id('-g') };
    // A checkout in a 0700 folder, as in a CI job's mktemp or a private home.
    const hidden = await fs.mkdtemp(path.join(os.tmpdir(), 'kbx-hidden-'));
    const base = await fs.mkdtemp('/var/cache/kbx-test-');
    t.teardown(async () => {
      await fs.rm(hidden, { recursive: true, force: true });
      await fs.rm(base, { recursive: true, force: true });
    });
    await fs.cp(installedNativeBuild().dir, path.join(hidden, 'native'), { recursive: true, verbatimSymlinks: true });
    const build: NativeBuild = { dir: path.join(hidden, 'native'), version: `test-${randomBytes(4).toString('hex')}` };
    const cache = path.join(base, 'cache');

    await fs.chmod(base, 0o777);
    await t.rejects(runnableNativeDir(build, postgresUser, cache), {
      name: 'UnsafePathError',
      message: `refusing to use ${base}: its mode is 0777; group and others must not write to it`,
    });
    t.notOk(existsSync(cache), 'an unsafe ancestor: nothing made below it');
    await fs.chmod(base, 0o755);

    await fs.mkdir(cache);
    await fs.chown(cache, NOBODY, NOBODY);
    await t.rejects(runnableNativeDir(build, postgresUser, cache), {
      message: `refusing to use ${cache}: it is owned by uid ${NOBODY}`,
    });
    await fs.chown(cache, 0, 0);
    await fs.chmod(cache, 0o775);
    await t.rejects(runnableNativeDir(build, postgresUser, cache), {
      message: `refusing to use ${cache}: its mode is 0775`,
    });
    t.same(await fs.readdir(cache), [], 'nothing copied into a refused folder');
    await fs.rmdir(cache);

    const copy = await runnableNativeDir(build, postgresUser, cache);
    t.equal(copy, path.join(cache, `postgres-${build.version}-${process.platform}-${process.arch}`));
    t.same(await fs.readdir(cache), [path.basename(copy)], 'no staging folder left behind');
    for (const dir of [cache, copy]) {
      const st = await fs.lstat(dir);
      t.same([st.uid, st.mode & 0o777], [0, 0o755], `${dir} is root's, 0755`);
    }
    const version = spawnSync(path.join(copy, 'bin', 'postgres'), ['--version'], { ...postgresUser, encoding: 'utf8' });
    t.match(version.stdout, /^postgres \(PostgreSQL\) \d+/, 'the postgres user runs the copy');

    const before = await fs.stat(path.join(copy, 'bin', 'postgres'));
    t.equal(await runnableNativeDir(build, postgresUser, cache), copy);
    t.equal((await fs.stat(path.join(copy, 'bin', 'postgres'))).ino, before.ino, 'the second start reuses the copy');

    await fs.chown(copy, NOBODY, NOBODY);
    await t.rejects(runnableNativeDir(build, postgresUser, cache), {
      message: `refusing to use ${copy}: it is owned by uid ${NOBODY}`,
    });
  },
);
