/** Rewrite plans: parse5's edits of a contentHtml JSON text, replayed without parsing (docs/architecture.md). */
import { createHash, hash } from 'node:crypto';
import { PlanFormatError } from '../../../errors.js';
import type { Pause } from '../../../event-loop.js';
import type { DirectPieces } from '../../encode/document-encoder.js';
import type { JsonChunker } from '../../encode/json-encoder.js';

/** The rewriter's rules version: raise it when its output may change (a D3 rule, parse5, the splice). */
export const PLAN_RULES_VERSION = 1;

export const PLAN_KEY_BYTES = 32;

export const EMPTY_PLAN: Buffer = Buffer.alloc(0);

const PIECE_PREFIX = 0;
const PIECE_COPY = 1;
const PIECE_LITERAL = 2;

const SCRATCH = Buffer.allocUnsafeSlow(64 * 1024);

/** SHA-256 of `a`, `b` then `c[cFrom…]`; a Hash object per call cost more than the hashing of a small document. */
function sha256(a: Buffer, b: Buffer, c: Buffer, cFrom = 0): Buffer {
  const n = a.length + b.length + c.length - cFrom;
  if (n > SCRATCH.length) return createHash('sha256').update(a).update(b).update(c.subarray(cFrom)).digest();
  a.copy(SCRATCH, 0);
  b.copy(SCRATCH, a.length);
  c.copy(SCRATCH, a.length + b.length, cFrom);
  return hash('sha256', SCRATCH.subarray(0, n), 'buffer');
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
  return sha256(ofPrefix(prefix).keyHead, json, plan);
}

/** Whether `stored` (a key, then its plan: plan-store.ts) is the plan of `json` under `prefix`; no copy of it is made. */
export function storedPlanMatches(json: Buffer, prefix: string, stored: Buffer): boolean {
  return stored.length >= PLAN_KEY_BYTES && sha256(ofPrefix(prefix).keyHead, json, stored, PLAN_KEY_BYTES).compare(stored, 0, PLAN_KEY_BYTES) === 0;
}

/** `prefix` as it stands inside a JSON string. */
export function jsonPrefixBytes(prefix: string): Buffer {
  return ofPrefix(prefix).json;
}

function startsAt(text: Buffer, needle: Buffer, at: number): boolean {
  return needle.length > 0 && at + needle.length <= text.length && text.compare(needle, 0, needle.length, at, at + needle.length) === 0;
}

class Bytes {
  #buf = new Uint8Array(64);
  length = 0;

  push(b: number): void {
    if (this.length === this.#buf.length) this.#grow(1);
    this.#buf[this.length++] = b;
  }

  pushAll(bytes: Uint8Array): void {
    if (this.length + bytes.length > this.#buf.length) this.#grow(bytes.length);
    this.#buf.set(bytes, this.length);
    this.length += bytes.length;
  }

  varint(n: number): void {
    while (n >= 0x80) {
      this.push((n % 0x80) | 0x80);
      n = Math.floor(n / 0x80);
    }
    this.push(n);
  }

  view(): Uint8Array {
    return this.#buf.subarray(0, this.length);
  }

  take(): Buffer {
    return Buffer.from(this.view());
  }

  #grow(need: number): void {
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.length + need));
    next.set(this.#buf.subarray(0, this.length));
    this.#buf = next;
  }
}

/** Builds a plan edit by edit as the rewriter finds them: memory grows with the plan's bytes only (D8.8). */
export class PlanBuilder {
  readonly #out = new Bytes();
  readonly #pieces = new Bytes();
  #prevEnd = 0;

  constructor(
    private readonly json: Buffer,
    private readonly prefixJson: Buffer,
  ) {}

  /** Replaces `json[start, end)` (bytes, after the previous edit) by `text`, as it stands in JSON text. */
  edit(start: number, end: number, text: Buffer): void {
    const { json, prefixJson } = this;
    const pieces = this.#pieces;
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
    this.#out.varint(start - this.#prevEnd);
    this.#out.varint(end - start);
    this.#out.varint(count);
    this.#out.pushAll(pieces.view());
    this.#prevEnd = end;
  }

  finish(): Buffer {
    return this.#out.length === 0 ? EMPTY_PLAN : this.#out.take();
  }
}

export function planFromEdits(json: Buffer, bounds: readonly number[], texts: readonly Buffer[], prefixJson: Buffer): Buffer {
  const builder = new PlanBuilder(json, prefixJson);
  texts.forEach((text, i) => builder.edit(bounds[2 * i]!, bounds[2 * i + 1]!, text));
  return builder.finish();
}

class PlanReader {
  constructor(
    private readonly plan: Buffer,
    public at = 0,
  ) {}

  get done(): boolean {
    return this.at >= this.plan.length;
  }

  varint(): number {
    let n = 0;
    let scale = 1;
    for (;;) {
      const b = this.plan[this.at++];
      if (b === undefined) throw new PlanFormatError('a varint runs past the end of the plan');
      n += (b & 0x7f) * scale;
      if (b < 0x80) return n;
      scale *= 0x80;
    }
  }

  bytes(length: number): Buffer {
    if (this.at + length > this.plan.length) throw new PlanFormatError('literal bytes run past the end of the plan');
    const out = this.plan.subarray(this.at, this.at + length);
    this.at += length;
    return out;
  }
}

/**
 * The JSON text with `plan` (its bytes from `from` on) applied, as views; throws PlanFormatError
 * while iterating if the plan does not fit.
 */
export function* planPieces(json: Buffer, plan: Buffer, prefixJson: Buffer, from = 0): Generator<Buffer, void, undefined> {
  if (plan.length === from) {
    yield json;
    return;
  }
  const r = new PlanReader(plan, from);
  let at = 0;
  while (!r.done) {
    const start = at + r.varint();
    const end = start + r.varint();
    if (end > json.length) throw new PlanFormatError('an edit lies past the end of the JSON text');
    if (start > at) yield json.subarray(at, start);
    for (let n = r.varint(); n > 0; n--) {
      const head = r.varint();
      const kind = head % 4;
      const length = Math.floor(head / 4);
      if (kind === PIECE_PREFIX) yield prefixJson;
      else if (kind === PIECE_COPY) {
        const from = start + r.varint();
        if (from + length > end) throw new PlanFormatError('a copied run lies outside its edit');
        yield json.subarray(from, from + length);
      } else if (kind === PIECE_LITERAL) yield r.bytes(length);
      else throw new PlanFormatError(`unknown piece kind ${kind}`);
    }
    at = end;
  }
  if (at < json.length) yield json.subarray(at);
}

/**
 * The spliced length, or -1 when the plan does not fit `json`. A number unless the event-loop slice
 * ran out on the way (decisions.md D8.8): most plans are a few edits, and a promise per document cost more.
 */
export function splicedLength(json: Buffer, plan: Buffer, prefixBytes: number, pause: Pause, from = 0): number | Promise<number> {
  const r = new PlanReader(plan, from);
  let at = 0;
  let length = json.length;
  const run = (): number | Promise<number> => {
    let edits = 0;
    try {
      while (!r.done) {
        if (++edits % 4096 === 0) {
          const paused = pause();
          if (paused !== undefined) return paused.then(run);
        }
        const start = at + r.varint();
        const end = start + r.varint();
        if (end > json.length) return -1;
        length -= end - start;
        for (let n = r.varint(); n > 0; n--) {
          const head = r.varint();
          const kind = head % 4;
          const pieceLength = Math.floor(head / 4);
          if (kind === PIECE_PREFIX) length += prefixBytes;
          else if (kind === PIECE_COPY) {
            if (start + r.varint() + pieceLength > end) return -1;
            length += pieceLength;
          } else if (kind === PIECE_LITERAL) length += r.bytes(pieceLength).length;
          else return -1;
        }
        at = end;
      }
      return length;
    } catch (err) {
      if (err instanceof PlanFormatError) return -1;
      throw err;
    }
  };
  return run();
}

/** A plan under this many bytes has fewer pieces than the encoder writes between pauses (export-body.ts, D8.8). */
const DIRECT_PLAN_BYTES = 1024;

/**
 * `json` with a checked plan (`plan[from…]`, splicedLength gave its length) applied, as the encoder
 * takes it: the text itself for an empty plan, a PlanSplice written at once for a small one, else
 * planPieces' views, between which the encoder may pause.
 */
export function planSplice(json: Buffer, plan: Buffer, prefixJson: Buffer, from = 0): Buffer | DirectPieces | Iterable<Buffer> {
  if (plan.length === from) return json;
  if (plan.length - from < DIRECT_PLAN_BYTES) return new PlanSplice(json, plan, from, prefixJson);
  return { [Symbol.iterator]: () => planPieces(json, plan, prefixJson, from) };
}

/**
 * A checked splice (splicedLength gave its length) of a small plan, written straight into the
 * encoder's chunks: no view or generator per piece, which a warm export of small documents paid
 * for each one. Iterating it gives planPieces' views.
 */
export class PlanSplice implements DirectPieces {
  constructor(
    readonly json: Buffer,
    readonly plan: Buffer,
    readonly from: number,
    readonly prefixJson: Buffer,
  ) {}

  writeTo(out: JsonChunker): void {
    const { json, plan, prefixJson } = this;
    const r = new PlanReader(plan, this.from);
    let at = 0;
    while (!r.done) {
      const start = at + r.varint();
      const end = start + r.varint();
      out.pushRange(json, at, start);
      for (let n = r.varint(); n > 0; n--) {
        const head = r.varint();
        const kind = head % 4;
        const length = Math.floor(head / 4);
        if (kind === PIECE_PREFIX) out.push(prefixJson);
        else if (kind === PIECE_COPY) {
          const from = start + r.varint();
          out.pushRange(json, from, from + length);
        } else {
          out.pushRange(plan, r.at, r.at + length);
          r.at += length;
        }
      }
      at = end;
    }
    out.pushRange(json, at, json.length);
  }

  [Symbol.iterator](): Iterator<Buffer> {
    return planPieces(this.json, this.plan, this.prefixJson, this.from);
  }
}
