/**
 * What every benchmark scenario returns: figures as ratios against a baseline measured in the same
 * run on the same data (these machines are shared and noisy), absolute numbers beside them.
 */

/** One line of the RESULTS.md table. */
export interface ResultRow {
  /** Scenario number and name, e.g. `5. Rewriter`. */
  scenario: string;
  /** What is measured, e.g. `HTML MB/s, medium set (38.2 MB)`. */
  what: string;
  /** The baseline with its absolute figure, e.g. `parse5-html-rewriting-stream 18.2 MB/s`. */
  baseline: string;
  /** kb-export's figure, e.g. `kb-export 61.0 MB/s`. */
  measured: string;
  /** The ratio in the direction the target states (e.g. measured/baseline for speed). */
  ratio: number;
  /** The target as the issue states it, e.g. `≥ 3×` or `≤ 1.5×`; '' for a figure without one. */
  target: string;
  /** Whether the target is met; null for a figure without a target. */
  met: boolean | null;
}

/** A scenario's rows and any notes (correctness checks, extra figures) printed under the table. */
export interface ScenarioResult {
  rows: ResultRow[];
  notes: string[];
}

/** `x` with `digits` decimals, for tables. */
export function fmt(x: number, digits = 1): string {
  return Number.isFinite(x) ? x.toFixed(digits) : String(x);
}

/** Bytes as MB (10^6), for tables. */
export function mb(bytes: number, digits = 1): string {
  return `${fmt(bytes / 1e6, digits)} MB`;
}
