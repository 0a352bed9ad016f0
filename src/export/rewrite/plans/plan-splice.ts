/** A stored or computed plan applied to its contentHtml JSON text: checked, measured, and written as the encoder takes it. */
import { PlanFormatError } from '../../../errors.js';
import type { Pause } from '../../../event-loop.js';
import type { DirectPieces, RangeSink } from '../rewrites.js';
import { PIECE_COPY, PIECE_LITERAL, PIECE_PREFIX } from './rewrite-plan.js';

class PlanReader {
  constructor(
    readonly plan: Buffer,
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

  /** Steps over `length` literal bytes; returns where they start. */
  skip(length: number): number {
    if (this.at + length > this.plan.length) throw new PlanFormatError('literal bytes run past the end of the plan');
    this.at += length;
    return this.at - length;
  }
}

/**
 * Writes the text from `at` up to the plan's next edit, then what the edit puts in its place, to
 * `out`; returns where the text goes on. Throws PlanFormatError where the plan does not fit.
 */
function applyEdit(r: PlanReader, json: Buffer, at: number, prefixJson: Buffer, out: RangeSink): number {
  const start = at + r.varint();
  const end = start + r.varint();
  if (end > json.length) throw new PlanFormatError('an edit lies past the end of the JSON text');
  out.pushRange(json, at, start);
  for (let n = r.varint(); n > 0; n--) {
    const head = r.varint();
    const kind = head % 4;
    const length = Math.floor(head / 4);
    if (kind === PIECE_PREFIX) out.pushRange(prefixJson, 0, prefixJson.length);
    else if (kind === PIECE_COPY) {
      const from = start + r.varint();
      if (from + length > end) throw new PlanFormatError('a copied run lies outside its edit');
      out.pushRange(json, from, from + length);
    } else if (kind === PIECE_LITERAL) {
      const from = r.skip(length);
      out.pushRange(r.plan, from, from + length);
    } else throw new PlanFormatError(`unknown piece kind ${kind}`);
  }
  return end;
}

/** Views of the ranges one edit writes; the whole buffer itself when a range is all of it. */
class Views implements RangeSink {
  readonly list: Buffer[] = [];

  pushRange(b: Buffer, start: number, end: number): void {
    if (end > start) this.list.push(start === 0 && end === b.length ? b : b.subarray(start, end));
  }
}

/**
 * The JSON text with `plan` (its bytes from `from` on) applied, as views; throws PlanFormatError
 * while iterating if the plan does not fit. Made an edit at a time, so a consumer may pause between views.
 */
export function* planPieces(
  json: Buffer,
  plan: Buffer,
  prefixJson: Buffer,
  from = 0,
): Generator<Buffer, void, undefined> {
  if (plan.length === from) {
    yield json;
    return;
  }
  const r = new PlanReader(plan, from);
  let at = 0;
  while (!r.done) {
    const views = new Views();
    at = applyEdit(r, json, at, prefixJson, views);
    yield* views.list;
  }
  if (at < json.length) yield json.subarray(at);
}

/** Counts what applyEdit writes: one for the module, emptied before each edit, which never pauses. */
const COUNTED = new (class implements RangeSink {
  bytes = 0;

  pushRange(_b: Buffer, start: number, end: number): void {
    this.bytes += end - start;
  }
})();

/**
 * The spliced length, or -1 when the plan does not fit `json`. A number unless the event-loop slice
 * ran out on the way (D8.8): most plans are a few edits, and a promise per document cost more.
 */
export function splicedLength(
  json: Buffer,
  plan: Buffer,
  prefixJson: Buffer,
  pause: Pause,
  from = 0,
): number | Promise<number> {
  return measure(new PlanReader(plan, from), json, prefixJson, pause, 0, 0);
}

/** splicedLength from `r`'s next edit on, `at` and `length` (of the text before `at`) as the edits before it left them. */
function measure(
  r: PlanReader,
  json: Buffer,
  prefixJson: Buffer,
  pause: Pause,
  at: number,
  length: number,
): number | Promise<number> {
  let edits = 0;
  try {
    while (!r.done) {
      if (++edits % 4096 === 0) {
        const paused = pause();
        if (paused !== undefined) return paused.then(() => measure(r, json, prefixJson, pause, at, length));
      }
      COUNTED.bytes = 0;
      at = applyEdit(r, json, at, prefixJson, COUNTED);
      length += COUNTED.bytes;
    }
    return length + json.length - at;
  } catch (err) {
    if (err instanceof PlanFormatError) return -1;
    throw err;
  }
}

/** A plan under this many bytes has fewer pieces than the encoder writes between pauses (export-body.ts, D8.8). */
const DIRECT_PLAN_BYTES = 1024;

/**
 * `json` with a checked plan (`plan[from…]`, splicedLength gave its length) applied, as the encoder
 * takes it: the text itself for an empty plan, a PlanSplice written at once for a small one, else
 * planPieces' views, between which the encoder may pause.
 */
export function planSplice(
  json: Buffer,
  plan: Buffer,
  prefixJson: Buffer,
  from = 0,
): Buffer | DirectPieces | Iterable<Buffer> {
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

  writeTo(out: RangeSink): void {
    const r = new PlanReader(this.plan, this.from);
    let at = 0;
    while (!r.done) at = applyEdit(r, this.json, at, this.prefixJson, out);
    out.pushRange(this.json, at, this.json.length);
  }

  [Symbol.iterator](): Iterator<Buffer> {
    return planPieces(this.json, this.plan, this.prefixJson, this.from);
  }
}
