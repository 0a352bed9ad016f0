/**
 * Writes RESULTS.md: the machine, versions and data, then every scenario's figures with their
 * baselines and ratios, the CPU profile summary, and the hand-kept log of optimisations.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { ResultRow } from '../result.js';
import type { SelfTime } from './cpu-profile.js';

export interface Report {
  quick: boolean;
  date: string;
  machine: { cpu: string; cores: number; memGiB: number; node: string; os: string };
  postgres: string;
  database: string;
  durationS: number;
  data: { name: string; generated: number; exported: number; bodyBytes: number | null; loadMs: number }[];
  rows: ResultRow[];
  notes: string[];
  profile: { top: SelfTime[]; totalMs: number; what: string } | null;
}

const cell = (s: string) => s.replace(/\|/g, '\\|');

function verdict(met: boolean | null): string {
  if (met === null) return '';
  return met ? 'met' : '**missed**';
}

/** The Markdown text of a report; `optimisations` is the hand-kept log appended as it is. */
export function renderReport(r: Report, optimisations: string): string {
  const out: string[] = [];
  out.push(`# kb-export benchmark results${r.quick ? ' (quick: small sizes)' : ''}`);
  out.push('');
  out.push(
    `Written by \`npm run bench${r.quick ? ':quick' : ''}\` on ${r.date} in ${r.durationS.toFixed(0)} s. ` +
      'Every ratio compares kb-export with a baseline measured in the same run on the same data; ' +
      'absolute figures are printed beside the ratios, never asserted (the machine is shared and noisy).',
  );
  out.push('');
  out.push('## Machine');
  out.push('');
  out.push(`- CPU: ${r.machine.cpu}, ${r.machine.cores} cores, ${r.machine.memGiB} GiB`);
  out.push(`- OS: ${r.machine.os}`);
  out.push(`- Node.js: ${r.machine.node}`);
  out.push(`- PostgreSQL: ${r.postgres}`);
  out.push(`- Database: ${r.database}`);
  out.push('');
  out.push('## Data (src/generate/generator.ts, seed 42)');
  out.push('');
  out.push('| Knowledge base | Documents generated | Documents exported | Export body with HTML | Load time |');
  out.push('|---|---:|---:|---:|---:|');
  for (const d of r.data) {
    out.push(
      `| ${d.name} | ${d.generated.toLocaleString('en')} | ${d.exported.toLocaleString('en')} | ` +
        `${d.bodyBytes === null ? '–' : `${(d.bodyBytes / 1e6).toLocaleString('en', { maximumFractionDigits: 1 })} MB`} | ` +
        `${d.loadMs === 0 ? 'reused' : `${(d.loadMs / 1000).toFixed(1)} s`} |`,
    );
  }
  out.push('');
  out.push('## Figures');
  out.push('');
  out.push('| Scenario | What | Baseline | kb-export | Ratio | Target | |');
  out.push('|---|---|---|---|---:|---|---|');
  for (const row of r.rows) {
    out.push(
      `| ${cell(row.scenario)} | ${cell(row.what)} | ${cell(row.baseline)} | ${cell(row.measured)} | ` +
        `${row.ratio.toFixed(2)}× | ${cell(row.target)} | ${verdict(row.met)} |`,
    );
  }
  out.push('');
  if (r.notes.length > 0) {
    out.push('Notes:');
    out.push('');
    for (const n of r.notes) out.push(`- ${n}`);
    out.push('');
  }
  if (r.profile) {
    out.push('## Where the time goes');
    out.push('');
    out.push(
      `${r.profile.what}: ${(r.profile.totalMs / 1000).toFixed(1)} s of CPU in the server (idle left out). Top functions by self time:`,
    );
    out.push('');
    out.push('| Self time | Share | Function |');
    out.push('|---:|---:|---|');
    for (const t of r.profile.top)
      out.push(`| ${t.ms.toFixed(0)} ms | ${(t.share * 100).toFixed(1)} % | \`${cell(t.fn)}\` |`);
    out.push('');
  }
  out.push(optimisations.trim());
  out.push('');
  return out.join('\n');
}

/** Writes the report to `file`, appending the log kept in `optimisationsFile`. */
export async function writeReport(file: string, optimisationsFile: string, r: Report): Promise<void> {
  const optimisations = await readFile(optimisationsFile, 'utf8').catch(() => '');
  await writeFile(file, renderReport(r, optimisations));
}
