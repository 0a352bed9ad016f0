/**
 * Summarises a V8 `.cpuprofile` (as `node --cpu-prof` writes it) as the top functions by self time.
 */
import { readFile } from 'node:fs/promises';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  /** `name (file:line)`, with the path shortened to the package or project file. */
  fn: string;
  /** Self time, ms. */
  ms: number;
  /** Share of all non-idle samples, 0..1. */
  share: number;
}

function where(url: string, line: number): string {
  if (url === '') return '';
  const nm = url.lastIndexOf('node_modules/');
  const short =
    nm >= 0 ? url.slice(nm + 'node_modules/'.length) : url.replace(/^.*\/dist\//, '').replace(/^file:\/\//, '');
  return `${short}:${line + 1}`;
}

/**
 * Top `n` functions by self time over one or more profiles (a process's main thread and its worker
 * threads each write one), summed; idle and program time (an event loop waiting) are left out.
 */
export async function topSelfTime(
  files: string | readonly string[],
  n: number,
): Promise<{ top: SelfTime[]; totalMs: number }> {
  const selfUs = new Map<string, number>();
  let totalUs = 0;
  for (const file of typeof files === 'string' ? [files] : files) {
    const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile;
    const byId = new Map(profile.nodes.map((node) => [node.id, node]));
    for (let i = 0; i < profile.samples.length; i++) {
      const node = byId.get(profile.samples[i]!);
      // timeDeltas[i] is the time before sample i; attributing it to sample i is what DevTools does.
      const dt = profile.timeDeltas[i] ?? 0;
      if (!node) continue;
      const name = node.callFrame.functionName || '(anonymous)';
      if (name === '(idle)' || name === '(program)') continue;
      const loc = where(node.callFrame.url, node.callFrame.lineNumber);
      const key = loc ? `${name} (${loc})` : name;
      selfUs.set(key, (selfUs.get(key) ?? 0) + dt);
      totalUs += dt;
    }
  }
  const top = [...selfUs.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([fn, us]) => ({ fn, ms: us / 1000, share: totalUs > 0 ? us / totalUs : 0 }));
  return { top, totalMs: totalUs / 1000 };
}
