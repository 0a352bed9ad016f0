/**
 * The runtime settings of the `kb-export` executable, read from its shebang (src/cli/kb-export.ts writes them
 * there and nowhere else), so the benchmarks' server (bench/server.ts, started with `node`, not
 * through the shebang) and the tests that check a running server run with the same.
 */
import { readFileSync } from 'node:fs';

export interface CliRuntime {
  /** Variables the shebang sets before node starts (glibc malloc settings), e.g. `{ MALLOC_ARENA_MAX: '2' }`. */
  env: Record<string, string>;
  /** Flags the shebang passes to node, e.g. `['--max-semi-space-size=2']`. */
  nodeFlags: string[];
}

/** Parses `#!/usr/bin/env -S NAME=value … node --flag …` from the first line of `cliPath`. Throws on any other shape. */
export function cliRuntime(cliPath: string): CliRuntime {
  const first = readFileSync(cliPath, 'utf8').split('\n', 1)[0] ?? '';
  const m = /^#!\/usr\/bin\/env -S (.*)$/.exec(first);
  if (!m) throw new Error(`${cliPath}: the first line is not a "#!/usr/bin/env -S …" shebang`);
  const words = m[1]!.trim().split(/\s+/);
  const node = words.indexOf('node');
  if (node < 0) throw new Error(`${cliPath}: the shebang does not run node`);
  const env: Record<string, string> = {};
  for (const word of words.slice(0, node)) {
    const eq = word.indexOf('=');
    if (eq <= 0) throw new Error(`${cliPath}: "${word}" in the shebang is not NAME=value`);
    env[word.slice(0, eq)] = word.slice(eq + 1);
  }
  return { env, nodeFlags: words.slice(node + 1) };
}
