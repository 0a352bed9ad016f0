/**
 * Seed and size of the randomized fault tests. FAULT_SEED replays a failure (the seed is printed
 * in each assertion message); FAULT_SCALE multiplies the number of runs for a longer soak than
 * `npm test` affords (for example FAULT_SCALE=4 before a release).
 */
export const SEED = Number(process.env.FAULT_SEED) || Date.now() % 2 ** 31;

const SCALE = Math.max(1, Number(process.env.FAULT_SCALE) || 1);

/** `n` runs, times FAULT_SCALE. */
export function faultRuns(n: number): number {
  return Math.round(n * SCALE);
}
