/**
 * `--git`: each run of a mirror committed in DIR with the `git` command, so the history of the
 * knowledge base is the folder's history. DIR becomes a repository on the first run; the mirror's
 * own `.kb-export/` is excluded (`.git/info/exclude`), not committed. Without a configured
 * identity, commits are made as `kb-export <kb-export@localhost>`.
 */
import { execFile } from 'node:child_process';
import { appendFile, mkdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

async function git(dir: string, args: string[]): Promise<{ code: number; stdout: string }> {
  try {
    const { stdout } = await run('git', args, { cwd: dir, maxBuffer: 64 * 1024 * 1024 });
    return { code: 0, stdout };
  } catch (err) {
    const e = err as { code?: number | string; stderr?: string; message: string };
    if (typeof e.code === 'number') return { code: e.code, stdout: e.stderr ?? '' };
    throw new Error(e.code === 'ENOENT' ? 'the git command is not installed' : e.message);
  }
}

async function must(dir: string, args: string[]): Promise<string> {
  const r = await git(dir, args);
  if (r.code !== 0) throw new Error(`git ${args[0]} exited with ${r.code}: ${r.stdout.trim()}`);
  return r.stdout;
}

/**
 * Commits everything in `dir` but `.kb-export/` with `subject` and `body`; resolves with the new
 * commit's short hash, or null when nothing changed. Throws when git is missing or fails.
 */
export async function commitRun(dir: string, subject: string, body: string): Promise<string | null> {
  if ((await stat(path.join(dir, '.git')).catch(() => null)) === null) await must(dir, ['init', '--quiet']);
  const exclude = path.join(dir, '.git', 'info', 'exclude');
  await mkdir(path.dirname(exclude), { recursive: true });
  const excluded = await readFile(exclude, 'utf8').catch(() => '');
  if (!excluded.split('\n').includes('/.kb-export/'))
    await appendFile(exclude, `${excluded === '' || excluded.endsWith('\n') ? '' : '\n'}/.kb-export/\n`);
  await must(dir, ['add', '--all', '.']);
  if ((await git(dir, ['diff', '--cached', '--quiet'])).code === 0) return null;
  const identity =
    (await git(dir, ['config', 'user.email'])).code === 0
      ? []
      : ['-c', 'user.name=kb-export', '-c', 'user.email=kb-export@localhost'];
  await must(dir, [...identity, 'commit', '--quiet', '-m', subject, '-m', body]);
  return (await must(dir, ['rev-parse', '--short', 'HEAD'])).trim();
}
