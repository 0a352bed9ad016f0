/** A flagged contentHtml's rewrite plan, with parse5 fed in pieces and no object kept per edit (D8.8). */
import { HtmlMediaRewriter, type Edit } from '../rewriter/html-rewriter.js';
import { jsonPrefixBytes, PlanBuilder } from './rewrite-plan.js';
import type { Pause } from '../../../event-loop.js';

/**
 * JSON text decoded at a time on the event loop, so each step stays short (D8.8). parse5 keeps all of an
 * unfinished token, so a long one (a data: image) costs a copy of what it buffered with each piece.
 */
const PIECE_BYTES = 64 * 1024;

/**
 * The slowest the rewriter plans, bytes of JSON text per second: far below its measured speed (about
 * 3 MB/s for nothing but `<img src=a>`). What a batch's planning is allowed, on a worker and in the
 * snapshot's idle timeout (D8.7).
 */
export const SLOWEST_PLANNING_BYTES_PER_S = 1024 * 1024;

/** Byte offsets in a JSON string text of UTF-16 offsets in its decoded string, asked for in order. */
class JsonOffsets {
  #byte = 1; // after the opening quote
  #unit = 0;

  constructor(private readonly j: Buffer) {}

  byteOf(unit: number): number {
    const j = this.j;
    let byte = this.#byte;
    let u = this.#unit;
    while (u < unit) {
      const b = j[byte]!;
      if (b === 0x5c /* \ */) byte += j[byte + 1] === 0x75 /* u */ ? 6 : 2;
      else if (b < 0x80) byte += 1;
      else if (b < 0xe0) byte += 2;
      else if (b < 0xf0) byte += 3;
      else {
        byte += 4;
        u++;
      }
      u++;
    }
    this.#byte = byte;
    this.#unit = u;
    return byte;
  }
}

function planningRewriter(j: Buffer, prefix: string): { rewriter: HtmlMediaRewriter; builder: PlanBuilder } {
  const builder = new PlanBuilder(j, jsonPrefixBytes(prefix));
  const offsets = new JsonOffsets(j);
  const rewriter = new HtmlMediaRewriter(prefix, (e: Edit) => {
    const start = offsets.byteOf(e.start);
    const end = offsets.byteOf(e.end);
    builder.edit(start, end, Buffer.from(JSON.stringify(e.text).slice(1, -1)));
  });
  return { rewriter, builder };
}

export function planContentHtml(j: Buffer, prefix: string, pieceBytes = PIECE_BYTES): Buffer {
  const { rewriter, builder } = planningRewriter(j, prefix);
  for (const [piece, last] of decodedPieces(j, pieceBytes)) rewriter.write(piece, last);
  return builder.finish();
}

/**
 * planContentHtml in slices of about `pieceBytes`, calling `pause` after each: the plan, or its promise
 * once a pause yielded on the way (D8.8). Most documents are one short piece, and a
 * promise for each cost 2-5 % more CPU on documents of a few hundred bytes.
 */
export function planContentHtmlSliced(
  j: Buffer,
  prefix: string,
  pause: Pause,
  pieceBytes = PIECE_BYTES,
): Buffer | Promise<Buffer> {
  const { rewriter, builder } = planningRewriter(j, prefix);
  const pieces = decodedPieces(j, pieceBytes);
  const go = (): Buffer | Promise<Buffer> => {
    for (let next = pieces.next(); next.done !== true; next = pieces.next()) {
      const [piece, last] = next.value;
      rewriter.write(piece, last);
      const paused = pause();
      if (paused !== undefined) return paused.then(go);
    }
    return builder.finish();
  };
  return go();
}

function* decodedPieces(j: Buffer, pieceBytes: number): Generator<[string, boolean]> {
  const end = j.length - 1; // before the closing quote
  if (end - 1 <= pieceBytes) {
    yield [JSON.parse(j.toString('utf8')) as string, true];
    return;
  }
  for (let at = 1; at < end;) {
    const cut = safeCut(j, Math.min(end, at + pieceBytes), end);
    yield [JSON.parse(`"${j.toString('utf8', at, cut)}"`) as string, cut === end];
    at = cut;
  }
}

/** The first offset at or after `target` outside an escape and a UTF-8 sequence (a split surrogate pair is fine). */
function safeCut(j: Buffer, target: number, end: number): number {
  let cut = target;
  for (let p = Math.max(1, target - 5); p < target; p++) {
    if (j[p] !== 0x5c) continue;
    let runStart = p;
    while (j[runStart - 1] === 0x5c) runStart--;
    if ((p - runStart) % 2 !== 0) continue;
    cut = Math.max(cut, p + (j[p + 1] === 0x75 ? 6 : 2));
  }
  while (cut < end && (j[cut]! & 0xc0) === 0x80) cut++;
  return Math.min(cut, end);
}
