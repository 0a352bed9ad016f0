/**
 * `kb-export backup` writing to a full file system, for real: a 256 KiB tmpfs mounted for the test
 * (root only; without the permission to mount, the test is skipped and says why). Whether the file
 * is plain, holds the server's compressed bytes, or is compressed by the client, a full disk is
 * exit 1 at once (no retry can help), one line naming the error, no temporary file left and an
 * existing PATH byte for byte as before.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { runBackupCli } from '../helpers/backup-cli.js';
import { exportBody, startStub } from '../helpers/export-stub.js';

const TMPFS_BYTES = 256 * 1024;

/** Mounts a tmpfs of TMPFS_BYTES at a new folder; resolves with the folder, or with why it cannot. */
function mountTmpfs(): { dir: string } | { skip: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_BYTES}`, 'tmpfs', dir], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    return { dir };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || (err as Error).message;
    return { skip: `cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): ${why}` };
  }
}

const mounted = mountTmpfs();
if ('dir' in mounted) {
  t.teardown(() => {
    execFileSync('umount', ['-l', mounted.dir]);
    rmSync(mounted.dir, { recursive: true, force: true });
  });
}

// Random text: even compressed, the export is larger than the file system.
const body = exportBody(1000);
const stub = await startStub(t, (req, res) => {
  const gzip = req.url!.includes('/books/gzip/');
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    etag: '"stub"',
    ...(gzip ? { 'content-encoding': 'gzip' } : {}),
  });
  res.end(gzip ? zlib.gzipSync(body, { level: 4 }) : body);
});

t.test(
  'a full disk: exit 1 at once with one line, no temporary file, PATH as it was',
  { skip: 'skip' in mounted && mounted.skip },
  async (t) => {
    const dir = (mounted as { dir: string }).dir;
    t.ok(zlib.gzipSync(body).length > TMPFS_BYTES, 'the export does not fit, compressed or not');
    const written: string[] = [];
    for (const [name, book, how] of [
      ['plain.json', 'identity', 'a plain file'],
      ['server.json.gz', 'gzip', "the server's gzip bytes"],
      ['client.json.gz', 'identity', 'compressed by the client'],
    ] as const) {
      const file = path.join(dir, name);
      const old = Buffer.from(`the old backup of ${name}\n`);
      writeFileSync(file, old);
      written.push(name);
      const requests = stub.requests.length;
      const r = await runBackupCli(['--server', stub.base, '--book', book, '--out', file, '--retries', '3', '--quiet']);
      t.equal(r.code, 1, `${how}: exit 1`);
      t.equal(stub.requests.length - requests, 1, `${how}: one request, no retry`);
      t.match(
        r.stderr,
        /^kb-export backup: backup failed: cannot write .*: ENOSPC: no space left on device.*; .* was left as it was\n$/,
        `${how}: one line naming the error`,
      );
      t.ok(readFileSync(file).equals(old), `${how}: PATH byte for byte as before`);
      t.same(readdirSync(dir).sort(), written.sort(), `${how}: no temporary file, nothing but the backups`);
    }
  },
);
