/**
 * What a change token says of its snapshot (change-token.ts): which transactions it saw, as a
 * pg_snapshot and a list of xids, written as unsigned LEB128 varints; and how a delta's SQL reads it.
 */
import type { ChangeSince } from './snapshot/changes-query.js';

/** A pg_snapshot: transactions below xmin had finished, xip were running, xmax and above had not started. */
export interface PgSnapshot {
  xmin: bigint;
  xmax: bigint;
  xip: bigint[];
}

export function parseSnapshot(text: string): PgSnapshot {
  const m = /^(\d+):(\d+):((?:\d+(?:,\d+)*)?)$/.exec(text);
  if (!m) throw new Error(`not a pg_snapshot: ${JSON.stringify(text)}`);
  return { xmin: BigInt(m[1]!), xmax: BigInt(m[2]!), xip: m[3] ? m[3].split(',').map(BigInt) : [] };
}

/**
 * How a token names which transactions between its snapshot's xmin and xmax the snapshot saw:
 * `running`, the ones it did not see (a primary's xip); `visible`, the ones it saw among those
 * that wrote the book (what a standby can tell, or a shorter list than a long xip); `horizon`,
 * none known, so all of them count as unseen (both lists too long: the delta may repeat documents
 * the client has, and misses none).
 */
export const KIND = { running: 0, visible: 1, horizon: 2 } as const;
export type Kind = (typeof KIND)[keyof typeof KIND];

/** What a token's snapshot saw, as the token tells it. */
export interface Seen {
  timeline: bigint;
  xmin: bigint;
  xmax: bigint;
  kind: Kind;
  list: bigint[];
}

/** Whether the token's snapshot certainly saw committed transaction `xid`. */
export function saw(s: Seen, xid: bigint): boolean {
  if (xid < s.xmin) return true;
  if (s.kind === KIND.running) return xid < s.xmax && !s.list.includes(xid);
  return s.kind === KIND.visible && s.list.includes(xid);
}

/** Derived from the token alone, so every server gives the same delta for the same token and data (D12.7). */
export function sinceOf(s: Seen): ChangeSince {
  if (s.kind === KIND.running) return { snapshot: `${s.xmin}:${s.xmax}:${s.list.join(',')}`, visible: '{}' };
  return { snapshot: `${s.xmin}:${s.xmin}:`, visible: `{${s.kind === KIND.visible ? s.list.join(',') : ''}}` };
}

export function writeVarint(out: number[], n: bigint): void {
  let v = n;
  do {
    const byte = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v > 0n ? byte | 0x80 : byte);
  } while (v > 0n);
}

/** An ascending list of xids from `from`, as varint gaps. */
export function listBytes(list: readonly bigint[], from: bigint): number[] {
  const out: number[] = [];
  writeVarint(out, BigInt(list.length));
  let last = from;
  for (const x of list) {
    writeVarint(out, x - last);
    last = x;
  }
  return out;
}

export class Reader {
  private at = 0;
  constructor(private readonly buf: Buffer) {}

  varint(): bigint {
    let v = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const byte = this.buf[this.at++];
      if (byte === undefined) throw new Error('truncated');
      v |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return v;
    }
    throw new Error('varint too long');
  }

  done(): boolean {
    return this.at === this.buf.length;
  }
}

/** The body after the fixed part; throws when it is not one this version writes. */
export function readSeen(r: Reader): { issuedS: bigint; seen: Seen } {
  const issuedS = r.varint();
  const timeline = r.varint();
  const xmin = r.varint();
  const xmax = xmin + r.varint();
  const kind = Number(r.varint());
  if (kind !== KIND.running && kind !== KIND.visible && kind !== KIND.horizon) throw new Error('unknown kind');
  const n = r.varint();
  const list: bigint[] = [];
  let last = xmin;
  for (let i = 0n; i < n; i++) {
    const x = last + r.varint();
    if ((i > 0n && x <= last) || x >= xmax) throw new Error('not an ascending list within the snapshot');
    list.push(x);
    last = x;
  }
  if (!r.done()) throw new Error('trailing bytes');
  return { issuedS, seen: { timeline, xmin, xmax, kind: kind as Kind, list } };
}
