/**
 * Scenario 6, Encoder: documents/s of kb-export's incremental encoder (`encodeDocument` over the
 * rows as the cursor returns them, pushed into a JsonChunker with `,` between documents and taken
 * out in chunks of bytes, as export-pipeline.ts does) against `JSON.stringify` of the very objects
 * the export emits for those rows, encoded to UTF-8 bytes as a socket write needs them; same
 * process, same run.
 *
 * The cursor returns each column as JSON text already escaped by PostgreSQL's `to_json` (query.ts),
 * so the encoder mostly copies bytes: string escaping, most of JSON.stringify's work, is done by the
 * database and is not timed here. The notes printed with the result say so.
 *
 * `node dist/bench/encoder.js [--quick]` runs it alone and prints the rows.
 */
import { DOC, type DocumentRow } from '../src/export/snapshot/rows.js';
import { isDeepStrictEqual } from 'node:util';
import { encodeDocument } from '../src/export/encode/document-encoder.js';
import { jsonHtmlMayNeedRewrite, mayNeedRewrite, rewriteHtml } from '../src/export/rewrite/rewriter/html-rewriter.js';
import { JsonChunker } from '../src/export/encode/json-encoder.js';
import { rewriteMediaUrl } from '../src/export/rewrite/rewriter/media-url.js';
import { FIELD, rowFromValues, stagedRow, type DocumentValues } from './lib/rows.js';
import type { SeedDocument } from '../src/load/seed-types.js';
import { generateDocuments } from '../src/generate/generator.js';
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

/** Bytes of the chunks taken out, as export-body.ts takes them. */
function chunkBytes(c: JsonChunker): number {
  let n = 0;
  for (const chunk of c.takeChunks()) n += chunk.length;
  return n;
}

const SCENARIO = '6. Encoder';
const COMMA = Buffer.from(',');
/** JsonChunker's default chunk size, used for the string baseline too. */
const CHUNK = new JsonChunker().chunkSize;

/**
 * A document's stored values in the cursor's column order (query.ts DOC): NULLs where the seed
 * loader stores them (seed-writer.ts), timestamps formatted as PostgreSQL's to_char does.
 * The round trip through JSON gives fresh flat strings instead of the generator's concatenations.
 */
function toValues(d: SeedDocument): DocumentValues {
  const iso = (t: string | null | undefined) => new Date(t ?? 0).toISOString();
  const v: DocumentValues = [
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
  return JSON.parse(JSON.stringify(v)) as DocumentValues;
}

interface Expected {
  object: Record<string, unknown>;
  /** Whether contentHtml came from the reference transform rather than from kb-export's rewriter. */
  htmlVerified: boolean;
}

/**
 * The document object the export must emit for stored values `v`, written from export-api.md 2.2
 * and decisions.md D2/D3 without document-encoder.ts: contentHtml and cover.url come from the
 * rewriter scenario's independent reference, or from rewriteHtml where that reference declines the HTML.
 */
function expectedObject(v: DocumentValues): Expected {
  const empty = (s: string | null) => (s === null || s === '' ? null : s);
  const orDefault = (s: string | null, d: string) => (s === null || s === '' ? d : s);
  const [id, slug, name, type, parentId, orderKey, description, emojiInfo, coverUrl, coverPosition, tags] = v;
  const [themeId, backgroundThemeId, bodyFontSize, createdAt, updatedAt, contentStr, contentHtml] = v.slice(11) as [
    string | null,
    string | null,
    string | null,
    string,
    string,
    string | null,
    string | null,
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
  /** Every exported document's stored values (status 1), in generation order. */
  values: DocumentValues[];
  /** The same documents as the cursor returns them: JSON text per column (rowFromValues), built once. */
  rows: DocumentRow[];
  /** The objects JSON.stringify encodes, one per row, parsed from JSON so they hold flat strings of their own. */
  objects: object[];
  /** Indexes of rows whose contentHtml JSON the encoder's pre-check passes, so it is copied without decoding. */
  plain: number[];
  /** Rows whose contentHtml JSON the pre-check sends to decoding although mayNeedRewrite on the HTML says no. */
  jsonOnlyFlagged: number;
  mismatches: number;
  examples: string[];
  /** Rows whose encoding is byte-identical to the UTF-8 of JSON.stringify of the expected object. */
  identical: number;
  /** Rows whose expected contentHtml had to come from rewriteHtml (the reference declined it). */
  unverifiedHtml: number;
}

/** Generates `documents` documents and checks kb-export's encoding of each against its expected object. */
async function prepare(documents: number): Promise<Data> {
  const data: Data = {
    values: [],
    rows: [],
    objects: [],
    plain: [],
    jsonOnlyFlagged: 0,
    mismatches: 0,
    examples: [],
    identical: 0,
    unverifiedHtml: 0,
  };
  for (const d of generateDocuments({ bookId: 'bench-encoder', documents, seed: 6 })) {
    // The cursor's query returns active documents only (export-api.md 4.1 rule 1).
    if (d.status !== 1) continue;
    const values = toValues(d);
    const row = rowFromValues(values);
    const exp = expectedObject(values);
    const chunker = new JsonChunker();
    const staged = stagedRow(row, BENCH_MEDIA_PREFIX);
    encodeDocument(row, staged.coverUrl, chunker, staged.html);
    const ours = Buffer.concat(chunker.takeChunks());
    const text = JSON.stringify(exp.object);
    let parsed: unknown;
    try {
      parsed = JSON.parse(ours.toString('utf8'));
    } catch {
      parsed = undefined;
    }
    if (!isDeepStrictEqual(parsed, exp.object) || JSON.stringify(parsed) !== text) {
      data.mismatches++;
      if (data.examples.length < 3) data.examples.push(`${values[FIELD.id]}: ${ours.toString('utf8', 0, 160)}…`);
    }
    if (ours.equals(Buffer.from(text))) data.identical++;
    if (!exp.htmlVerified) data.unverifiedHtml++;
    const html = row[DOC.contentHtml];
    const flagged = html !== null && jsonHtmlMayNeedRewrite(html);
    if (!flagged) data.plain.push(data.rows.length);
    else if (!mayNeedRewrite(values[FIELD.contentHtml]!)) data.jsonOnlyFlagged++;
    data.values.push(values);
    data.rows.push(row);
    data.objects.push(JSON.parse(text) as object);
    if (data.rows.length % 256 === 0) await yieldToEventLoop();
  }
  return data;
}

/**
 * One repetition of an encoder over the documents at `idx` (indexes into Data): the body's
 * documents joined with `,`, cut into chunks of about 64 KiB as Buffers ready for the socket.
 * Returns the bytes produced. Each encoder is a function literal of its own, so that no call site
 * inside a timed loop is shared between encoders.
 */
type Pass = (idx: readonly number[]) => number;

/** kb-export: encodeDocument over the cursor's rows into a JsonChunker, chunks taken when full (export-pipeline.ts). */
function oursPass(rows: readonly DocumentRow[]): Pass {
  return (idx) => {
    const out = new JsonChunker();
    const batch = Array.from(idx, (i) => rows[i]!);
    // The export's own order of work: the rewrite stage over the batch, then the encoder.
    const staged = batch.map((row) => stagedRow(row, BENCH_MEDIA_PREFIX));
    let bytes = 0;
    for (let i = 0; i < batch.length; i++) {
      if (i > 0) out.push(COMMA);
      encodeDocument(batch[i]!, staged[i]!.coverUrl, out, staged[i]!.html);
      if (out.full) bytes += chunkBytes(out);
    }
    return bytes + chunkBytes(out);
  };
}

/** Baseline, bytes per document: `Buffer.from(JSON.stringify(obj))` pushed into the same JsonChunker. */
function stringifyBytesPass(objects: readonly object[]): Pass {
  return (idx) => {
    const out = new JsonChunker();
    let bytes = 0;
    for (let i = 0; i < idx.length; i++) {
      if (i > 0) out.push(COMMA);
      out.push(Buffer.from(JSON.stringify(objects[idx[i]!])));
      if (out.full) bytes += chunkBytes(out);
    }
    return bytes + chunkBytes(out);
  };
}

/**
 * Baseline, UTF-8 per chunk: JSON.stringify's strings concatenated, each 64 Ki-character chunk
 * encoded with one Buffer.from (the export's own way before its rows arrived as JSON bytes).
 */
function stringifyTextPass(objects: readonly object[]): Pass {
  return (idx) => {
    let pending = '';
    let bytes = 0;
    for (let i = 0; i < idx.length; i++) {
      if (i > 0) pending += ',';
      pending += JSON.stringify(objects[idx[i]!]);
      if (pending.length >= CHUNK) {
        bytes += Buffer.from(pending).length;
        pending = '';
      }
    }
    return bytes + Buffer.from(pending).length;
  };
}

/**
 * For context: what an export without its own encoder would do per row, from the stored values as
 * a driver decodes them into strings: build the object (D2 rules, the media rewriting of D3),
 * JSON.stringify it and encode it to UTF-8.
 */
function builtObjectPass(values: readonly DocumentValues[]): Pass {
  const empty = (s: string | null) => (s === null || s === '' ? null : s);
  const orDefault = (s: string | null, d: string) => (s === null || s === '' ? d : s);
  const build = (r: DocumentValues) => {
    const coverUrl = r[FIELD.coverUrl];
    const tags = r[FIELD.tags];
    const html = r[FIELD.contentHtml];
    return {
      id: r[FIELD.id],
      slug: r[FIELD.slug],
      name: r[FIELD.name],
      type: r[FIELD.type],
      parentId: empty(r[FIELD.parentId]),
      orderKey: r[FIELD.orderKey],
      description: empty(r[FIELD.description]),
      emojiInfo: empty(r[FIELD.emojiInfo]),
      cover:
        coverUrl === null || coverUrl === ''
          ? null
          : {
              url: rewriteMediaUrl(coverUrl, BENCH_MEDIA_PREFIX),
              position: orDefault(r[FIELD.coverPosition], 'center'),
            },
      tags: tags === null || tags.length === 0 ? null : tags,
      themeId: orDefault(r[FIELD.themeId], 'default'),
      backgroundThemeId: orDefault(r[FIELD.backgroundThemeId], 'transparent'),
      bodyFontSize: orDefault(r[FIELD.bodyFontSize], 'default'),
      createdAt: r[FIELD.createdAt],
      updatedAt: r[FIELD.updatedAt],
      contentStr: empty(r[FIELD.contentStr]),
      contentHtml: html === null || html === '' ? null : rewriteHtml(html, BENCH_MEDIA_PREFIX),
    };
  };
  return (idx) => {
    const out = new JsonChunker();
    let bytes = 0;
    for (let i = 0; i < idx.length; i++) {
      if (i > 0) out.push(COMMA);
      out.push(Buffer.from(JSON.stringify(build(values[idx[i]!]!))));
      if (out.full) bytes += chunkBytes(out);
    }
    return bytes + chunkBytes(out);
  };
}

/** Keeps results observable so that no work can be optimised away. */
let sink = 0;

/** Runs `pass` `reps` times over `idx`; returns elapsed ms and the bytes of one repetition. */
function timed(idx: readonly number[], reps: number, pass: Pass): { ms: number; bytes: number } {
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) bytes = pass(idx);
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
  encoders: Record<K, Pass>,
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
    const warm = timed(idx, 1, encoders[name]);
    if (bytes !== -1 && warm.bytes !== bytes)
      throw new Error(`encoder: ${name} gave ${warm.bytes} bytes, expected ${bytes}`);
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
      samples.get(name)!.push(timed(idx, reps, encoders[name]).ms / reps);
    }
  }
  const perSecond = {} as Record<K, number>;
  for (const name of names) perSecond[name] = idx.length / (median(samples.get(name)!) / 1000);
  return { perSecond, bytes, reps };
}

/** Runs scenario 6 over 6,000 generated documents (2,000 with `quick`). */
export async function run(opts: { quick: boolean }): Promise<ScenarioResult> {
  const data = await prepare(opts.quick ? 2_000 : 6_000);
  const rounds = opts.quick ? 7 : 11;
  const sampleMs = opts.quick ? 60 : 250;
  const all = data.rows.map((_, k) => k);
  const ours = oursPass(data.rows);
  const bytesBase = stringifyBytesPass(data.objects);
  const textBase = stringifyTextPass(data.objects);
  const built = builtObjectPass(data.values);
  const plainFig = await measure({ ours, bytesBase, textBase, built }, data.plain, rounds, sampleMs);
  const everyFig = await measure({ ours, bytesBase, textBase }, all, rounds, sampleMs);
  const plain = plainFig.perSecond;
  const every = everyFig.perSecond;

  const count = (n: number) => n.toLocaleString('en');
  const perSec = (x: number) => `${count(Math.round(x))} documents/s`;
  // The baseline is the faster of the two ways of turning JSON.stringify's text into bytes.
  const best = (f: { bytesBase: number; textBase: number }) =>
    f.bytesBase >= f.textBase
      ? { rate: f.bytesBase, label: 'JSON.stringify + Buffer.from per document', other: f.textBase }
      : { rate: f.textBase, label: 'JSON.stringify, UTF-8 per 64 Ki chunk', other: f.bytesBase };
  const plainBase = best(plain);
  const everyBase = best(every);
  const ratio = plain.ours / plainBase.rate;
  const media = data.rows.length - data.plain.length;
  const rows: ResultRow[] = [
    {
      scenario: SCENARIO,
      what:
        `documents/s over ${count(data.plain.length)} documents whose contentHtml passes the pre-check (${mb(plainFig.bytes)} of JSON): ` +
        'bytes copied, nothing decoded',
      baseline: `${plainBase.label} ${perSec(plainBase.rate)}`,
      measured: `kb-export ${perSec(plain.ours)}`,
      ratio,
      target: '≥ 1×',
      met: ratio >= 1 && data.mismatches === 0,
    },
    {
      scenario: SCENARIO,
      what:
        `documents/s over all ${count(data.rows.length)} documents (${mb(everyFig.bytes)} of JSON), contentHtml decoded, ` +
        `rewritten and escaped again for the ${count(media)} the pre-check flags`,
      baseline: `${everyBase.label} ${perSec(everyBase.rate)}`,
      measured: `kb-export ${perSec(every.ours)}`,
      ratio: every.ours / everyBase.rate,
      target: '',
      met: null,
    },
  ];
  const notes = [
    `6: the HTML stage (\`rewriteBatchHtml\`, on the event loop, no stored plans) then \`encodeDocument(row, '${BENCH_MEDIA_PREFIX}', chunker, html)\` over the rows as the cursor returns them: each column's JSON text ` +
      "as PostgreSQL's to_json writes it (cover_url as stored text), as Buffers built once before timing with rowFromValues " +
      '(JSON.stringify standing in for to_json; test/export/encode/document-encoder.test.ts checks it gives the bytes PostgreSQL returns). ' +
      'Documents joined with `,` in a JsonChunker and taken out as Buffers of about 64 KiB, as export-pipeline.ts does. ' +
      'Baseline: JSON.stringify of the objects the export must emit for the same rows, built beforehand, turned into the same bytes ' +
      `two ways, the faster reported: Buffer.from per document into a JsonChunker (plain set ${perSec(plain.bytesBase)}, ` +
      `all ${perSec(every.bytesBase)}), or strings concatenated and encoded once per 64 Ki-character chunk ` +
      `(plain set ${perSec(plain.textBase)}, all ${perSec(every.textBase)}). ` +
      `Median of ${rounds} alternating rounds after a warm-up, each sample repeating the set (${plainFig.reps}× and ${everyFig.reps}×); ` +
      'GC forced (with --expose-gc) only before the warm-up.',
    "6: what this compares, plainly: the strings' JSON escaping, which is most of JSON.stringify's work, is done by PostgreSQL's to_json " +
      "in kb-export's design, in the database process and before these timings, so kb-export's encoder mostly copies bytes (keys, " +
      'defaults, and the columns as they arrived) and decodes, rewrites and escapes again only cover.url and a contentHtml the pre-check ' +
      "flags. That is the design (the driver also no longer decodes every column into a JS string, which the baseline's ready-made " +
      'objects do not pay for either), not two serialisers escaping the same strings; the figures are the Node side of the export only.',
    `6: for context, JSON.stringify of an object built from each row's decoded strings inside the timed loop (D2 rules, rewriteMediaUrl, ` +
      `rewriteHtml), encoded per document, as an export without its own encoder would do it: ${perSec(plain.built)} over the plain set ` +
      `(kb-export ${fmt(plain.ours / plain.built, 2)}× that).`,
    `6: the encoder's pre-check on contentHtml's JSON (jsonHtmlMayNeedRewrite) flags ${count(media)} of ${count(data.rows.length)} documents, ` +
      `${count(data.jsonOnlyFlagged)} of them ones mayNeedRewrite on the decoded HTML would have let through (decoded for nothing).`,
    `6: correctness: ${data.mismatches} mismatch(es) over ${count(data.rows.length)} documents: each document's bytes parse deep-equal to ` +
      'its expected object (written from export-api.md 2.2 and decisions.md D2/D3, without document-encoder.ts) and re-serialise to ' +
      `the same text; ${count(data.identical)} are byte-identical to the UTF-8 of JSON.stringify of that object. ` +
      `Expected contentHtml comes from the rewriter scenario's reference transform` +
      (data.unverifiedHtml > 0 ? `, or from rewriteHtml for the ${count(data.unverifiedHtml)} it declines.` : '.'),
    ...data.examples.map((e) => `6: mismatch, ${e}`),
  ];
  return { rows, notes };
}

await runIfMain(import.meta.url, run);
