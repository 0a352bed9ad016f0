/**
 * Command and arguments that run `argv` free of a test runner's hooks. tap loads its process
 * tracking and coverage into every child through NODE_OPTIONS and puts them back into any
 * environment a spawn passes, so the child starts through env(1), which sets NODE_OPTIONS last
 * (to `nodeOptions`) and execs in place: same pid, same signals. The hooks cost a CLI run more CPU
 * than the command itself; children started this way count for no coverage.
 */
export function untracked(argv: string[], nodeOptions = ''): [string, string[]] {
  return ['env', [`NODE_OPTIONS=${nodeOptions}`, ...argv]];
}
