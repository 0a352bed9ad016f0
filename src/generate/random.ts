/** The generator's deterministic randomness and order keys. */
/** mulberry32: small, fast, and the same sequence for the same seed on every machine. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** The n-th fractional-indexing key appended to a list (`a0`…`az`, `b00`…): the head letter counts digits (D1.1). */
export function fractionalKey(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`fractionalKey: ${n} is not a non-negative integer`);
  let digits = 1;
  let span = 62;
  while (n >= span) {
    n -= span;
    digits++;
    span *= 62;
    if (digits > 26) throw new RangeError('fractionalKey: beyond the z head');
  }
  let s = '';
  for (let i = 0; i < digits; i++) {
    s = B62[n % 62] + s;
    n = Math.floor(n / 62);
  }
  return String.fromCharCode(0x60 + digits) + s;
}
