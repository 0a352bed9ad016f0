/**
 * Scenario 6, Encoder: documents/s of kb-export's incremental encoder (`encodeDocument` over the
 * cursor's row arrays, joined with `,` into a JsonChunker as export-stream.ts does) against
 * `JSON.stringify` of the very objects the export emits for those rows, same process, same run.
 *
 * `node dist/bench/encoder.js [--quick]` runs it alone and prints the rows.
 */
import { isDeepStrictEqual } from 'node:util';
import { encodeDocument } from '../src/export/document-encoder.js';
import { mayNeedRewrite, rewriteHtml } from '../src/export/html-rewriter.js';
import { JsonChunker } from '../src/export/json-encoder.js';
import { rewriteMediaUrl } from '../src/export/media-url.js';
import type { DocumentRow } from '../src/export/query.js';
import type { SeedDocument } from '../src/load/seed-types.js';
import { generateDocuments } from './generate.js';
import { fmt, mb, type ResultRow, type ScenarioResult } from './result.js';
import {
  BENCH_MEDIA_PREFIX,
  collectGarbage,
  median,
  referenceRewrite,
  referenceUrl,
  runIfMain,
  yieldToEventLoop,
} from './rewriter.js';

const SCENARIO = '6. Encoder';

/**
 * A document as the cursor's query returns it (query.ts DOC order): NULLs where the seed loader
 * stores them (seed-writer.ts), timestamps already formatted as PostgreSQL's to_char does.
 * The round trip through JSON gives fresh flat strings, as the driver's parser does, instead of
 * the generator's concatenations.
 */
function toRow(d: SeedDocument): DocumentRow {
  const iso = (t: string | null | undefined) => new Date(t ?? 0).toISOString();
  const row: DocumentRow = [
    d.id,
    d.slug,
    d.name,
    d.type,
    d.parentId ?? null,
    d.orderKey,
    d.description ?? null,
    d.emojiInfo ?? null,
    d.cover?.url ?? null,
    d.cover?.position ?? null,
    d.tags ?? null,
    d.themeId ?? null,
    d.backgroundThemeId ?? null,
    d.bodyFontSize || null,
    iso(d.createdAt),
    iso(d.updatedAt),
    d.contentStr ?? null,
    d.contentHtml ?? null,
  ];
  return JSON.parse(JSON.stringify(row)) as DocumentRow;
}

interface Expected {
  object: Record<string, unknown>;
  /** Whether contentHtml came from the reference transform rather than from kb-export's rewriter. */
  htmlVerified: boolean;
}

/**
 * The document object the export must emit for `row`, written from export-api.md 2.2 and
 * decisions.md D2/D3 without document-encoder.ts: contentHtml and cover.url come from the rewriter
 * scenario's independent reference, or from rewriteHtml where that reference declines the HTML.
 */
function expectedObject(r: DocumentRow): Expected {
  const empty = (s: string | null) => (s === null || s === '' ? null : s);
  const orDefault = (s: string | null, d: string) => (s === null || s === '' ? d : s);
  const [id, slug, name, type, parentId, orderKey, description, emojiInfo, coverUrl, coverPosition, tags] = r;
  const [themeId, backgroundThemeId, bodyFontSize, createdAt, updatedAt, contentStr, contentHtml] = r.slice(11) as [
    string | null, string | null, string | null, string, string, string | null, string | null,
  ];
  let html: string | null = null;
  let htmlVerified = true;
  if (contentHtml !== null && contentHtml !== '') {
    const ref = referenceRewrite(contentHtml, BENCH_MEDIA_PREFIX);
    htmlVerified = ref !== null;
    html = ref ?? rewriteHtml(contentHtml, BENCH_MEDIA_PREFIX);
  }
  return {
    htmlVerified,
    object: {
      id,
      slug,
      name,
      type,
      parentId: empty(parentId),
      orderKey,
      description: empty(description),
      emojiInfo: empty(emojiInfo),
      cover:
        coverUrl === null || coverUrl === ''
          ? null
          : { url: referenceUrl(coverUrl, BENCH_MEDIA_PREFIX), position: orDefault(coverPosition, 'center') },
      tags: tags === null || tags.length === 0 ? null : [...tags],
      themeId: orDefault(themeId, 'default'),
      backgroundThemeId: orDefault(backgroundThemeId, 'transparent'),
      bodyFontSize: orDefault(bodyFontSize, 'default'),
      createdAt,
      updatedAt,
      contentStr: empty(contentStr),
      contentHtml: html,
    },
  };
}

interface Data {
  /** Every exported row (status 1), in cursor order. */
  rows: DocumentRow[];
  /** The objects JSON.stringify encodes, one per row, parsed from JSON so they hold flat strings of their own. */
  objects: object[];
  /** Indexes of rows whose contentHtml the rewriter's pre-check passes without tokenizing. */
  plain: number[];
  mismatches: number;
  examples: string[];
  /** Rows whose encoding is byte-identical to JSON.stringify of the expected object. */
  identical: number;
  /** Rows whose expected contentHtml had to come from rewriteHtml (the reference declined it). */
  unverifiedHtml: number;
}

/** Generates `documents` documents and checks kb-export's encoding of each against its expected object. */
async function prepare(documents: number): Promise<Data> {
  const data: Data = { rows: [], objects: [], plain: [], mismatches: 0, examples: [], identical: 0, unverifiedHtml: 0 };
  for (const d of generateDocuments({ bookId: 'bench-encoder', documents, seed: 6 })) {
    // The cursor's query returns active documents only (export-api.md 4.1 rule 1).
    if (d.status !== 1) continue;
    const row = toRow(d);
    const exp = expectedObject(row);
    const ours = encodeDocument(row, BENCH_MEDIA_PREFIX);
    const parsed = JSON.parse(ours) as unknown;
    const text = JSON.stringify(exp.object);
    if (!isDeepStrictEqual(parsed, exp.object) || JSON.stringify(parsed) !== text) {
      data.mismatches++;
      if (data.examples.length < 3) data.examples.push(`${row[0]}: ${ours.slice(0, 160)}…`);
    }
    if (ours === text) data.identical++;
    if (!exp.htmlVerified) data.unverifiedHtml++;
    const html = row[17];
    if (html === null || !mayNeedRewrite(html)) data.plain.push(data.rows.length);
    data.rows.push(row);
    data.objects.push(JSON.parse(text) as object);
    if (data.rows.length % 256 === 0) await yieldToEventLoop();
  }
  return data;
}

/** Encodes the document at an index of Data.rows. */
type Encode = (k: number) => string;

/** Keeps results observable so that no work can be optimised away. */
let sink = 0;

/**
 * Encodes the rows at `idx` `reps` times as the export does: `,` between documents, text pushed into
 * a JsonChunker and taken out a chunk at a time. Each chunk's UTF-8 length is taken, as writing it to
 * the socket must, which also flattens the concatenated strings so that their cost is not deferred.
 * Returns elapsed ms and the bytes of one repetition.
 */
function pass(idx: readonly number[], reps: number, encode: Encode): { ms: number; bytes: number } {
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) {
    const chunker = new JsonChunker();
    bytes = 0;
    for (let i = 0; i < idx.length; i++) {
      chunker.push(i === 0 ? '' : ',');
      chunker.push(encode(idx[i]!));
      if (chunker.full) bytes += Buffer.byteLength(chunker.take(), 'utf8');
    }
    bytes += Buffer.byteLength(chunker.take(), 'utf8');
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  sink += bytes;
  return { ms, bytes };
}

interface Figures<K extends string> {
  /** docs/s of each encoder, median over the rounds. */
  perSecond: Record<K, number>;
  /** Bytes of UTF-8 one encoder's pass produces (the same for all, checked). */
  bytes: number;
  reps: number;
}

/**
 * Times the encoders over the rows at `idx`: a warm-up, then `rounds` rounds, each starting with the
 * next encoder in turn so that none always runs on a heap another just filled. Each timed sample
 * repeats the set often enough to last about `sampleMs`.
 */
async function measure<K extends string>(
  encoders: Record<K, Encode>,
  idx: readonly number[],
  rounds: number,
  sampleMs: number,
): Promise<Figures<K>> {
  const names = Object.keys(encoders) as K[];
  await yieldToEventLoop();
  collectGarbage();
  let bytes = -1;
  let slowest = 0.01;
  for (const name of names) {
    const warm = pass(idx, 1, encoders[name]);
    if (bytes !== -1 && warm.bytes !== bytes) throw new Error(`encoder: ${name} gave ${warm.bytes} bytes, expected ${bytes}`);
    bytes = warm.bytes;
    slowest = Math.max(slowest, warm.ms);
  }
  const reps = Math.max(1, Math.ceil(sampleMs / slowest));
  const samples = new Map<K, number[]>(names.map((n) => [n, []]));
  // No forced GC between rounds: see collectGarbage.
  for (let i = 0; i < rounds; i++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(i + j) % names.length]!;
      await yieldToEventLoop();
      samples.get(name)!.push(pass(idx, reps, encoders[name]).ms / reps);
    }
  }
  const perSecond = {} as Record<K, number>;
  for (const name of names) perSecond[name] = idx.length / (median(samples.get(name)!) / 1000);
  return { perSecond, bytes, reps };
}

/**
 * What an export built on JSON.stringify would do per row: map the row to its object (D2 rules, the
 * media rewriting of D3) and stringify it. Only for the note beside the target row.
 */
function stringifyBuiltObject(r: DocumentRow): string {
  const empty = (s: string | null) => (s === null || s === '' ? null : s);
  const orDefault = (s: string | null, d: string) => (s === null || s === '' ? d : s);
  const coverUrl = r[8];
  const tags = r[10];
  const html = r[17];
  return JSON.stringify({
    id: r[0],
    slug: r[1],
    name: r[2],
    type: r[3],
    parentId: empty(r[4]),
    orderKey: r[5],
    description: empty(r[6]),
    emojiInfo: empty(r[7]),
    cover: coverUrl === null || coverUrl === '' ? null : { url: rewriteMediaUrl(coverUrl, BENCH_MEDIA_PREFIX), position: orDefault(r[9], 'center') },
    tags: tags === null || tags.length === 0 ? null : tags,
    themeId: orDefault(r[11], 'default'),
    backgroundThemeId: orDefault(r[12], 'transparent'),
    bodyFontSize: orDefault(r[13], 'default'),
    createdAt: r[14],
    updatedAt: r[15],
    contentStr: empty(r[16]),
    contentHtml: html === null || html === '' ? null : rewriteHtml(html, BENCH_MEDIA_PREFIX),
  });
}

/** Runs scenario 6 over 6,000 generated documents (2,000 with `quick`). */
export async function run(opts: { quick: boolean }): Promise<ScenarioResult> {
  const data = await prepare(opts.quick ? 2_000 : 6_000);
  const rounds = opts.quick ? 7 : 11;
  const sampleMs = opts.quick ? 60 : 250;
  const all = data.rows.map((_, k) => k);
  const ours: Encode = (k) => encodeDocument(data.rows[k]!, BENCH_MEDIA_PREFIX);
  const base: Encode = (k) => JSON.stringify(data.objects[k]);
  const built: Encode = (k) => stringifyBuiltObject(data.rows[k]!);
  const plainFig = await measure({ ours, base, built }, data.plain, rounds, sampleMs);
  const everyFig = await measure({ ours, base }, all, rounds, sampleMs);
  const plain = { ...plainFig.perSecond, bytes: plainFig.bytes, reps: plainFig.reps };
  const every = { ...everyFig.perSecond, bytes: everyFig.bytes, reps: everyFig.reps };

  const count = (n: number) => n.toLocaleString('en');
  const perSec = (x: number) => `${count(Math.round(x))} documents/s`;
  const ratio = plain.ours / plain.base;
  const media = data.rows.length - data.plain.length;
  const rows: ResultRow[] = [
    {
      scenario: SCENARIO,
      what:
        `documents/s over ${count(data.plain.length)} documents without media tags (${mb(plain.bytes)} of JSON): ` +
        'the rewriter\'s pre-check runs, its tokenizer does not',
      baseline: `JSON.stringify ${perSec(plain.base)}`,
      measured: `kb-export ${perSec(plain.ours)}`,
      ratio,
      target: '≥ 1×',
      met: ratio >= 1 && data.mismatches === 0,
    },
    {
      scenario: SCENARIO,
      what: `documents/s over all ${count(data.rows.length)} documents (${mb(every.bytes)} of JSON), the rewriter included for the ${count(media)} with media`,
      baseline: `JSON.stringify ${perSec(every.base)}`,
      measured: `kb-export ${perSec(every.ours)}`,
      ratio: every.ours / every.base,
      target: '',
      met: null,
    },
  ];
  const notes = [
    `6: \`encodeDocument(row, '${BENCH_MEDIA_PREFIX}')\` over the cursor's row arrays (active documents, timestamps as to_char formats them) ` +
      'against JSON.stringify of the objects the export must emit for the same rows, built beforehand; both joined with `,` into a ' +
      'JsonChunker of 64 Ki characters, with the UTF-8 length of every chunk taken as the socket write would. ' +
      `Median of ${rounds} alternating rounds after a warm-up, each sample repeating the set (${plain.reps}× and ${every.reps}×); ` +
      'GC forced (with --expose-gc) only before the warm-up.',
    `6: for context, JSON.stringify of an object built from each row inside the timed loop (D2 rules, rewriteMediaUrl, rewriteHtml), ` +
      `as an export without its own encoder would do it: ${perSec(plain.built)} over the documents without media tags ` +
      `(kb-export ${fmt(plain.ours / plain.built, 2)}× that).`,
    `6: correctness: ${data.mismatches} mismatch(es) over ${count(data.rows.length)} documents: each document's JSON parses deep-equal to ` +
      'its expected object (written from export-api.md 2.2 and decisions.md D2/D3, without document-encoder.ts) and re-serialises to ' +
      `the same text; ${count(data.identical)} are byte-identical to JSON.stringify of that object as encoded. ` +
      `Expected contentHtml comes from the rewriter scenario's reference transform` +
      (data.unverifiedHtml > 0 ? `, or from rewriteHtml for the ${count(data.unverifiedHtml)} it declines.` : '.'),
    ...data.examples.map((e) => `6: mismatch, ${e}`),
  ];
  return { rows, notes };
}

await runIfMain(import.meta.url, run);
