/**
 * Rewrite plans: what the media rewriter (html-rewriter.ts, parse5) decided for one contentHtml
 * JSON text under one media proxy prefix, in a form that reproduces its output without
 * tokenizing again (decisions.md D3; stored by sql/0005_rewrite_plans.sql).
 *
 * A plan is a list of edits in byte offsets of the JSON text as PostgreSQL's `to_json` returns it
 * (query.ts), each edit's new bytes written as pieces: the prefix's JSON text, a run of the JSON
 * text itself (the kept middle of a URL), or literal bytes. parse5 stays the rewriter of record:
 * a plan is only ever built from its edits (planFromEdits), and the parts of that plan (planParts)
 * give the very bytes the splice of those edits gives.
 *
 * A plan is valid only for the JSON text and prefix it was computed from: its key (planKey) hashes
 * both (with PLAN_RULES_VERSION) and the plan itself, and a stored plan is used only when its key
 * equals the key of the row's text at export time and that plan. The prefix is part of the key
 * because the rewriter's decisions depend on it (D3.2: a URL already under the prefix is left alone).
 */
import { createHash } from 'node:crypto';

/**
 * The version of the rewriter's rules that plans were computed with. Change it whenever the
 * rewriter's output for some input may change (a D3 rule, parse5, the splice): every stored plan
 * then stops matching and is computed again. test/export/rewrite/rewrite-plan.test.ts fails when
 * the output over its corpus changes while this stays the same.
 */
export const PLAN_RULES_VERSION = 1;

/** Bytes of a plan key (SHA-256). */
export const PLAN_KEY_BYTES = 32;

/** A plan with no edits: the JSON text is exported as stored. */
export const EMPTY_PLAN: Buffer = Buffer.alloc(0);

const PIECE_PREFIX = 0;
const PIECE_COPY = 1;
const PIECE_LITERAL = 2;

/**
 * What a plan is computed from: SHA-256 of the rules version, the media proxy prefix `prefix` and
 * JSON text `json` (contentHtml as the cursor returns it). About 2 GB/s, against the tokenizer's
 * 50 MB/s.
 */
export function contentDigest(json: Buffer, prefix: string): Buffer {
  return createHash('sha256').update(`kb-export rewrite plan ${PLAN_RULES_VERSION}\0${prefix}\0`).update(json).digest();
}

/**
 * The key a plan is stored under: SHA-256 of the contentDigest it was computed from and of the plan
 * itself, so a stored plan is used only with the text and prefix it was computed from, and only as
 * it was written: a plan moved to another row, or damaged, no longer matches its key.
 */
export function planKey(digest: Buffer, plan: Buffer): Buffer {
  return createHash('sha256').update(digest).update(plan).digest();
}

let lastPrefix = '';
let lastPrefixJson: Buffer = Buffer.alloc(0);

/**
 * `prefix` as it stands inside a JSON string (the prefix holds no `"` or `\`, but escape anyway),
 * kept for the prefix last asked for: a server has one.
 */
export function jsonPrefixBytes(prefix: string): Buffer {
  if (prefix !== lastPrefix || lastPrefixJson.length === 0) {
    lastPrefix = prefix;
    lastPrefixJson = Buffer.from(JSON.stringify(prefix).slice(1, -1));
  }
  return lastPrefixJson;
}

/** Whether `needle` (non-empty) stands in `text` at `at`. */
function startsAt(text: Buffer, needle: Buffer, at: number): boolean {
  return needle.length > 0 && at + needle.length <= text.length && text.compare(needle, 0, needle.length, at, at + needle.length) === 0;
}

/** Appends `n` (≥ 0, < 2^53) as an unsigned LEB128 varint. */
function pushVarint(out: number[], n: number): void {
  while (n >= 0x80) {
    out.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
}

/**
 * The plan of JSON text `json` whose edits replace `json[bounds[2i], bounds[2i+1])` by
 * `texts[i]` (the new value's bytes as they stand in the JSON text), in order and not
 * overlapping. `prefixJson` is jsonPrefixBytes of the prefix the edits were computed under.
 *
 * Each new value is cut at every occurrence of the prefix; a run between two is written as a copy
 * of the JSON text when it occurs in the bytes it replaces (the usual case: `src="a.png"` becomes
 * the prefix and a copy of `a.png`), as literal bytes otherwise (a D3.7 normalised path, an
 * escaped value). Any such cut gives back `texts[i]` exactly under this prefix, and the key
 * covers the prefix. Format: per edit, varints of the gap since the previous edit's end, the
 * length replaced and the number of pieces; per piece a varint `value << 2 | kind`, with the
 * copy's offset from the edit's start after it, or the literal's bytes.
 */
export function planFromEdits(json: Buffer, bounds: readonly number[], texts: readonly Buffer[], prefixJson: Buffer): Buffer {
  if (texts.length === 0) return EMPTY_PLAN;
  const out: number[] = [];
  let prevEnd = 0;
  texts.forEach((text, i) => {
    const start = bounds[2 * i]!;
    const end = bounds[2 * i + 1]!;
    const pieces: number[] = [];
    let count = 0;
    let p = 0;
    while (p < text.length) {
      count++;
      if (startsAt(text, prefixJson, p)) {
        pushVarint(pieces, PIECE_PREFIX);
        p += prefixJson.length;
        continue;
      }
      let q = prefixJson.length > 0 ? text.indexOf(prefixJson, p + 1) : -1;
      if (q === -1) q = text.length;
      const run = text.subarray(p, q);
      const at = json.subarray(start, end).indexOf(run);
      if (at !== -1) {
        pushVarint(pieces, run.length * 4 + PIECE_COPY);
        pushVarint(pieces, at);
      } else {
        pushVarint(pieces, run.length * 4 + PIECE_LITERAL);
        for (const b of run) pieces.push(b);
      }
      p = q;
    }
    pushVarint(out, start - prevEnd);
    pushVarint(out, end - start);
    pushVarint(out, count);
    for (const b of pieces) out.push(b);
    prevEnd = end;
  });
  return Buffer.from(out);
}

/** Reads plans; throws PlanFormatError past the end of the plan. */
class PlanReader {
  at = 0;
  constructor(private readonly plan: Buffer) {}

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

/** A plan that cannot be read or does not fit its JSON text: the caller tokenizes instead. */
export class PlanFormatError extends Error {
  override name = 'PlanFormatError';
}

/**
 * The parts that make up contentHtml's JSON text `json` once plan `plan` (planFromEdits) is
 * applied under the prefix whose JSON text is `prefixJson`, in order; `[json]` for an empty plan.
 * The parts are views of `json`, of the plan and `prefixJson` itself: nothing is copied.
 * Throws PlanFormatError for a plan that does not fit `json`: a key that matched makes that a
 * bug or a corrupt row, never a reason to export wrong bytes.
 */
export function planParts(json: Buffer, plan: Buffer, prefixJson: Buffer): Buffer[] {
  if (plan.length === 0) return [json];
  const r = new PlanReader(plan);
  const parts: Buffer[] = [];
  let at = 0;
  while (!r.done) {
    const start = at + r.varint();
    const end = start + r.varint();
    if (end > json.length) throw new PlanFormatError('an edit lies past the end of the JSON text');
    if (start > at) parts.push(json.subarray(at, start));
    for (let n = r.varint(); n > 0; n--) {
      const head = r.varint();
      const kind = head % 4;
      const length = Math.floor(head / 4);
      if (kind === PIECE_PREFIX) parts.push(prefixJson);
      else if (kind === PIECE_COPY) {
        const from = start + r.varint();
        if (from + length > end) throw new PlanFormatError('a copied run lies outside its edit');
        parts.push(json.subarray(from, from + length));
      } else if (kind === PIECE_LITERAL) parts.push(r.bytes(length));
      else throw new PlanFormatError(`unknown piece kind ${kind}`);
    }
    at = end;
  }
  if (at < json.length) parts.push(json.subarray(at));
  return parts;
}
