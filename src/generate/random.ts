/**
 * The generator's deterministic randomness and order keys: a seeded PRNG and the keys that keep
 * byte-wise order numeric (decisions.md D1.1).
 */
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

/**
 * The integer part of a fractional-indexing key (the scheme of rocicorp/fractional-indexing) for
 * the n-th key appended at the end of a list: `a0`…`az`, then `b00`…`bzz`, then `c000`…; the head
 * letter gives the number of digits, so byte-wise order is numeric order.
 */
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
