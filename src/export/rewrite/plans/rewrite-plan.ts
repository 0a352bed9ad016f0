/** Rewrite plans: parse5's edits of a contentHtml JSON text, built and keyed here, replayed without parsing by plan-splice.ts (docs/architecture.md). */
import { createHash, hash } from 'node:crypto';

/** The rewriter's rules version: raise it when its output may change (a D3 rule, parse5, the splice). */
export const PLAN_RULES_VERSION = 1;

export const PLAN_KEY_BYTES = 32;

export const EMPTY_PLAN: Buffer = Buffer.alloc(0);

/** A piece's kind, the low two bits of its head (plan-splice.ts reads them). */
export const PIECE_PREFIX = 0;
export const PIECE_COPY = 1;
export const PIECE_LITERAL = 2;

const SCRATCH = Buffer.allocUnsafeSlow(64 * 1024);
/** SCRATCH's first n bytes for n < 4096, each view made once (at most 4,095, about 0.4 MB): a view per small document was the hash's largest garbage. */
const VIEWED_BYTES = 4096;
const SCRATCH_VIEWS = new Array<Buffer | undefined>(VIEWED_BYTES);

/**
 * SHA-256 of `a`, `b` then `c[cFrom…]`, as a Buffer or as a string of one char a byte ('binary' is
 * latin1); a Hash object per call cost more than the hashing of a small document.
 */
function sha256(a: Buffer, b: Buffer, c: Buffer, cFrom: number, encoding: 'buffer'): Buffer;
function sha256(a: Buffer, b: Buffer, c: Buffer, cFrom: number, encoding: 'binary'): string;
function sha256(a: Buffer, b: Buffer, c: Buffer, cFrom: number, encoding: 'buffer' | 'binary'): Buffer | string {
  const n = a.length + b.length + c.length - cFrom;
  if (n > SCRATCH.length) {
    const h = createHash('sha256').update(a).update(b).update(c.subarray(cFrom));
    return encoding === 'buffer' ? h.digest() : h.digest('binary');
  }
  a.copy(SCRATCH, 0);
  b.copy(SCRATCH, a.length);
  c.copy(SCRATCH, a.length + b.length, cFrom);
  const data = n < VIEWED_BYTES ? (SCRATCH_VIEWS[n] ??= SCRATCH.subarray(0, n)) : SCRATCH.subarray(0, n);
  return encoding === 'buffer' ? hash('sha256', data, 'buffer') : hash('sha256', data, 'binary');
}

/** What the last prefix seen gives (a server has one): its bytes inside a JSON string, and the key's head. */
let derived: { prefix: string; json: Buffer; keyHead: Buffer } | null = null;

function ofPrefix(prefix: string): { json: Buffer; keyHead: Buffer } {
  if (derived?.prefix !== prefix) {
    const json = Buffer.from(JSON.stringify(prefix).slice(1, -1));
    derived = { prefix, json, keyHead: Buffer.from(`kb-export rewrite plan ${PLAN_RULES_VERSION}\0${prefix}\0`) };
  }
  return derived;
}

/**
 * SHA-256 of the rules version, the prefix, contentHtml's JSON text and the plan: a plan moved to
 * another row, or damaged, no longer matches. One hash per document: the text and the plan need no
 * boundary, as a key is only ever compared for the same stored plan bytes.
 */
export function planKey(json: Buffer, prefix: string, plan: Buffer): Buffer {
  return sha256(ofPrefix(prefix).keyHead, json, plan, 0, 'buffer');
}

/**
 * Whether `stored` (a key, then its plan: plan-store.ts) is the plan of `json` under `prefix`; no copy
 * of it is made. The digest is a string: a Buffer's ArrayBuffer per document cost a warm export
 * twice the hashing (bench/optimisations.md).
 */
export function storedPlanMatches(json: Buffer, prefix: string, stored: Buffer): boolean {
  if (stored.length < PLAN_KEY_BYTES) return false;
  const digest = sha256(ofPrefix(prefix).keyHead, json, stored, PLAN_KEY_BYTES, 'binary');
  for (let i = 0; i < PLAN_KEY_BYTES; i++) if (digest.charCodeAt(i) !== stored[i]) return false;
  return true;
}

/** `prefix` as it stands inside a JSON string. */
export function jsonPrefixBytes(prefix: string): Buffer {
  return ofPrefix(prefix).json;
}

function startsAt(text: Buffer, needle: Buffer, at: number): boolean {
  return (
    needle.length > 0 &&
    at + needle.length <= text.length &&
    text.compare(needle, 0, needle.length, at, at + needle.length) === 0
  );
}

/** A growing byte string, its memory kept for the next use: most plans are a few bytes, and a buffer each was garbage. */
class Bytes {
  #buf = Buffer.allocUnsafeSlow(64);
  length = 0;

  /** Bytes of memory it holds, whatever its length. */
  get capacity(): number {
    return this.#buf.length;
  }

  push(b: number): void {
    if (this.length === this.#buf.length) this.#grow(1);
    this.#buf[this.length++] = b;
  }

  pushAll(bytes: Uint8Array): void {
    if (this.length + bytes.length > this.#buf.length) this.#grow(bytes.length);
    this.#buf.set(bytes, this.length);
    this.length += bytes.length;
  }

  /** Appends what `other` holds, without a view of it. */
  pushBytes(other: Bytes): void {
    if (this.length + other.length > this.#buf.length) this.#grow(other.length);
    other.#buf.copy(this.#buf, this.length, 0, other.length);
    this.length += other.length;
  }

  varint(n: number): void {
    while (n >= 0x80) {
      this.push((n % 0x80) | 0x80);
      n = Math.floor(n / 0x80);
    }
    this.push(n);
  }

  /** A copy of the bytes, from Node's shared pool when small. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.length);
    this.#buf.copy(out, 0, 0, this.length);
    return out;
  }

  #grow(need: number): void {
    const next = Buffer.allocUnsafeSlow(Math.max(this.#buf.length * 2, this.length + need));
    this.#buf.copy(next, 0, 0, this.length);
    this.#buf = next;
  }
}

/** One edit's pieces, filled and read within `edit`: one for every builder of the thread. */
let pieces = new Bytes();
/** The plans' bytes of builders that finished, for the next ones: builders may be open at once (D8.8). */
const idleOuts: Bytes[] = [];
const IDLE_OUTS = 4;
/** A buffer this large is not kept for the next plan or edit: a large document's must not stay in memory. */
const KEPT_OUT_BYTES = 64 * 1024;

/** Builds a plan edit by edit as the rewriter finds them: memory grows with the plan's bytes only (D8.8). */
export class PlanBuilder {
  #out: Bytes | null = idleOuts.pop() ?? new Bytes();
  #prevEnd = 0;

  constructor(
    private readonly json: Buffer,
    private readonly prefixJson: Buffer,
  ) {}

  /** Replaces `json[start, end)` (bytes, after the previous edit) by `text`, as it stands in JSON text. */
  edit(start: number, end: number, text: Buffer): void {
    const { json, prefixJson } = this;
    const out = this.#out;
    if (out === null) throw new Error('PlanBuilder: the plan was finished');
    pieces.length = 0;
    let count = 0;
    let p = 0;
    while (p < text.length) {
      count++;
      if (startsAt(text, prefixJson, p)) {
        pieces.varint(PIECE_PREFIX);
        p += prefixJson.length;
        continue;
      }
      let q = prefixJson.length > 0 ? text.indexOf(prefixJson, p + 1) : -1;
      if (q === -1) q = text.length;
      const run = text.subarray(p, q);
      const at = json.subarray(start, end).indexOf(run);
      if (at !== -1) {
        pieces.varint(run.length * 4 + PIECE_COPY);
        pieces.varint(at);
      } else {
        pieces.varint(run.length * 4 + PIECE_LITERAL);
        pieces.pushAll(run);
      }
      p = q;
    }
    out.varint(start - this.#prevEnd);
    out.varint(end - start);
    out.varint(count);
    out.pushBytes(pieces);
    if (pieces.capacity > KEPT_OUT_BYTES) pieces = new Bytes();
    this.#prevEnd = end;
  }

  /** The plan; the builder takes no more edits. */
  finish(): Buffer {
    const out = this.#out;
    if (out === null) throw new Error('PlanBuilder: the plan was finished');
    this.#out = null;
    const plan = out.length === 0 ? EMPTY_PLAN : out.take();
    if (out.capacity <= KEPT_OUT_BYTES && idleOuts.length < IDLE_OUTS) {
      out.length = 0;
      idleOuts.push(out);
    }
    return plan;
  }
}

export function planFromEdits(
  json: Buffer,
  bounds: readonly number[],
  texts: readonly Buffer[],
  prefixJson: Buffer,
): Buffer {
  const builder = new PlanBuilder(json, prefixJson);
  texts.forEach((text, i) => builder.edit(bounds[2 * i]!, bounds[2 * i + 1]!, text));
  return builder.finish();
}
