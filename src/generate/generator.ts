/**
 * A deterministic generator (seeded PRNG) of realistic knowledge bases: a tree of categories and
 * documents (nested categories, a few documents under documents) with fractional-indexing order
 * keys, HTML bodies of varied length with a heavy tail (most a few KB, some tens or hundreds of KB)
 * made of paragraphs, headings, lists, tables, code blocks, quotes and links; about half the
 * documents carry relative images (src + srcset) and attachments; unicode text in several
 * languages; tags; covers; about 5% inactive documents. Used by the demo (`npm start`), the tests
 * and the benchmarks (named sizes: SIZES).
 *
 * Speed matters (the large size is over 2 GB of text): sentences, titles and code snippets are
 * built once into fixed pools, already HTML-escaped, and bodies are concatenations of pool strings
 * (V8 ropes) with a handful of PRNG draws per block, never per word.
 */
import { createHash } from 'node:crypto';
import { rewriteHtml } from '../export/rewrite/html-rewriter.js';
import { normalizeMediaPrefix, rewriteMediaUrl } from '../export/rewrite/media-url.js';
import type { SeedBookHeader, SeedDocument } from '../load/seed-types.js';

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

const B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/**
 * Fixed-width base-62 key for the n-th sibling, so byte-wise order is numeric order (decisions.md
 * D1.1). For hand-made fixtures; generated documents use fractionalKey.
 */
export function orderKeyFor(n: number, width = 5): string {
  let s = '';
  for (let i = 0; i < width; i++) {
    s = B62[n % 62] + s;
    n = Math.floor(n / 62);
  }
  return 'a' + s;
}

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

// ---------------------------------------------------------------------------------------------
// Fixed pools. Built once from their own seed: a document's seed only picks from them, so the
// same (seed, options) gives the same documents in every process.

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function escapeAttr(s: string): string {
  return escapeHtml(s).replace(/"/g, '&quot;');
}

interface Lang {
  words: string[];
  /** Word separator: CJK text has none. */
  sep: string;
  stops: string[];
}

const EN_FUNCTION = (
  'the the the a a of of and and to to in in is is for on with that this it as be by are from or can will when each all not ' +
  'an we you your our they which'
).split(' ');
const EN_CONTENT = (
  'export stream cursor snapshot backpressure index knowledge base document category order key proxy media chunk encoder ' +
  'rewriter batch socket drain commit transaction replica backup search team release onboarding policy customer invoice ' +
  'meeting roadmap quarter budget incident runbook deployment service latency throughput cluster schema migration permission ' +
  'workflow template checklist review feedback milestone dashboard metric alert escalation vendor contract compliance security ' +
  'password account storage bucket upload image attachment table column row query report analysis design draft version history ' +
  'owner editor reader comment mention notification calendar holiday office travel expense hiring interview benefit training ' +
  'guideline standard process step example note warning tip summary overview introduction appendix FAQ API SDK CLI JSON HTML ' +
  'SQL HTTP UTF-8 PostgreSQL Node.js TypeScript Kubernetes Docker Redis S3 v2 2024 Q3 15% 42 3.14 quickly carefully always ' +
  'never usually first last new old large small internal external public private shared required optional default custom'
).split(' ');
// Rare tokens that encoders and escapers must get right, at the rate real prose has them.
const EN_RARE = [
  '"quoted"', "it's", "don't", 'R&D', 'Q&A', 'a<b', 'x > y', 'C:\\Users\\docs', '—', '–', '…', '“smart quotes”', '‘single’',
  '©', '™', '€20', '£5', '20°C', '½', '3×', '→', '✓', '•', 'naïve', 'café', 'résumé', 'Straße', 'Zürich', '🚀', '✅', '👍🏽',
  '👨‍👩‍👧', '🇯🇵', '❤️', 'e\u0301', 'non\u00a0breaking', 'zero\u200bwidth', 'مرحبا', 'שלום', 'ﬁ', '<tag>', '&amp;', 'a\\b',
];
const LANGS: Lang[] = [
  { words: [], sep: ' ', stops: ['.', '.', '.', '.', '?', '!', ':'] },
  {
    words: (
      'Übersicht Änderung Größe Straße Prozess Dokument Wissensdatenbank Freigabe Abteilung Vorlage Sicherung Benutzer ' +
      'und der die das mit für über nach wird ist nicht'
    ).split(' '),
    sep: ' ',
    stops: ['.', '.', '?', '!'],
  },
  {
    words: (
      'café naïve élève déjà où façade réunion équipe procédure modèle sauvegarde données utilisateur ' +
      'et le la les des pour avec être très'
    ).split(' '),
    sep: ' ',
    stops: ['.', '.', ' ?', ' !'],
  },
  {
    words: (
      'документ база знаний экспорт резервная копия пользователь отчёт встреча команда процесс шаблон поиск ' +
      'и в на с для не это'
    ).split(' '),
    sep: ' ',
    stops: ['.', '.', '?', '!'],
  },
  {
    words: 'ドキュメント 知識 検索 書き出し バックアップ 利用者 会議 手順 テンプレート 更新 確認 設定 の は を に が で と'.split(' '),
    sep: '',
    stops: ['。', '。', '？'],
  },
  {
    words: '文档 知识库 导出 备份 用户 会议 流程 模板 搜索 更新 设置 权限 的 是 在 和 了 有 我们'.split(' '),
    sep: '',
    stops: ['。', '。', '？', '！'],
  },
];
{
  const en = LANGS[0]!;
  for (const w of EN_FUNCTION) en.words.push(w, w);
  en.words.push(...EN_CONTENT);
}
/** Share of documents per entry of LANGS. */
const LANG_WEIGHTS = [0.8, 0.05, 0.04, 0.05, 0.03, 0.03];

interface Sentence {
  /** Plain text. */
  text: string;
  /** HTML-escaped text. */
  esc: string;
  /** HTML with occasional inline markup. */
  rich: string;
}

const POOL_RND = prng(0x5eed);

function pick<T>(rnd: () => number, a: readonly T[]): T {
  return a[Math.floor(rnd() * a.length)]!;
}

function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

function makeSentence(lang: Lang, index: number, minWords: number, maxWords: number, stop: boolean): Sentence {
  const rnd = POOL_RND;
  const n = minWords + Math.floor(rnd() * (maxWords - minWords + 1));
  const english = lang === LANGS[0];
  // Titles and cells are mostly nouns: English function words would make them read oddly.
  const vocabulary = english && !stop ? EN_CONTENT : lang.words;
  const words: string[] = [];
  for (let i = 0; i < n; i++) words.push(english && rnd() < 0.03 ? pick(rnd, EN_RARE) : pick(rnd, vocabulary));
  words[0] = capitalize(words[0]!);
  const end = stop ? pick(rnd, lang.stops) : '';
  const text = words.join(lang.sep) + end;
  const esc = escapeHtml(text);
  let rich = esc;
  const r = rnd();
  if (r < 0.3 && n > 2) {
    // One word or two gets inline markup, as editors produce it.
    const at = 1 + Math.floor(rnd() * (n - 2));
    const w = escapeHtml(words[at]!);
    const [open, close] =
      r < 0.1 ? ['<strong>', '</strong>']
      : r < 0.17 ? ['<em>', '</em>']
      : r < 0.22 ? ['<code>', '</code>']
      : r < 0.26 ? [`<a href="https://example.com/wiki/${index}" target="_blank" rel="noopener">`, '</a>']
      : [`<a href="../guide-${index % 50}">`, '</a>'];
    const before = words.slice(0, at).map(escapeHtml).join(lang.sep);
    const after = words.slice(at + 1).map(escapeHtml).join(lang.sep);
    rich = before + lang.sep + open + w + close + lang.sep + after + escapeHtml(end);
  }
  return { text, esc, rich };
}

const SENTENCES: Sentence[][] = LANGS.map((lang, li) =>
  Array.from({ length: li === 0 ? 4096 : 512 }, (_, i) => makeSentence(lang, i, 4, 22, true)),
);
const TITLES: Sentence[][] = LANGS.map((lang) => Array.from({ length: 512 }, (_, i) => makeSentence(lang, i, 1, 6, false)));
const CELLS: Sentence[][] = LANGS.map((lang) => Array.from({ length: 256 }, (_, i) => makeSentence(lang, i, 1, 4, false)));

/** Code blocks: language tag and source text (with tabs, backslashes, quotes, `<`, `&` and blank lines). */
const CODE: [string, string][] = (
  [
    ['typescript', [
      "import { stream } from './export.js';",
      '',
      'export async function run(sql: Sql): Promise<void> {',
      '  const rows = await sql`SELECT id FROM documents WHERE status = ${1}`;',
      '  for (const r of rows) console.log(`id: ${r.id}`);',
      '}',
    ]],
    ['sql', [
      'SELECT d.id, d.name',
      'FROM documents d',
      "WHERE d.book_id = $1 AND d.status = 1 AND d.name LIKE '%\\_draft%' ESCAPE '\\'",
      'ORDER BY d.order_key, d.id;',
    ]],
    ['bash', [
      '#!/usr/bin/env bash',
      'set -euo pipefail',
      'for f in ./backups/*.json; do',
      '  gzip -9 "$f" && echo "compressed: $f"',
      'done',
      'curl -H "Authorization: Bearer $KEY" "$BASE/api/v1/open/books/handbook/docs" > out.json',
    ]],
    ['go', [
      'package main',
      '',
      'import "fmt"',
      '',
      'func main() {',
      '\tfor i := 0; i < 3; i++ {',
      '\t\tfmt.Printf("row %d\\t%s\\n", i, "ok")',
      '\t}',
      '}',
    ]],
    ['python', [
      'def parse(line: str) -> dict:',
      '    """Split a tab-separated line."""',
      '    key, _, value = line.partition("\\t")',
      '    return {"key": key, "value": value.strip()}',
      '',
      'print(parse("a\\tb"))',
    ]],
    ['json', [
      '{',
      '  "name": "kb-export",',
      '  "paths": ["C:\\\\data\\\\kb", "/var/lib/kb"],',
      '  "unicode": "naïve — 日本語 🚀",',
      '  "nested": { "ok": true, "n": 42 }',
      '}',
    ]],
    ['html', [
      '<figure>',
      '  <img src="uploads/diagram.png" alt="diagram">',
      '  <figcaption>Not a real tag: it is escaped text &amp; stays as stored</figcaption>',
      '</figure>',
    ]],
    ['makefile', ['build:', '\tnpm run build', '', 'test: build', '\tnpm test -- --reporter=dot']],
    ['text', [
      '2024-03-01T10:00:00.000Z INFO  export started book=handbook',
      '2024-03-01T10:00:01.250Z WARN  slow client, waiting for drain',
      '2024-03-01T10:00:09.004Z INFO  export finished documents=18233 bytes=1.9GB',
    ]],
    ['regex', ['^(?<scheme>[A-Za-z][A-Za-z0-9+.-]*):\\/\\/(?<host>[^\\/\\s]+)(?<path>\\/\\S*)?$']],
  ] as [string, string[]][]
).map(([lang, lines]) => [lang, lines.join('\n') + '\n']);
const CODE_HTML = CODE.map(([lang, src]) => `<pre><code class="language-${lang}">${escapeHtml(src)}</code></pre>`);

/** Tags, a few of which need quoting in a PostgreSQL array literal or escaping in JSON. */
const TAGS = [
  'how-to', 'reference', 'onboarding', 'api', 'release-notes', 'internal', 'draft', 'faq', 'security', 'ops', 'design', 'legal',
  'hr', 'finance', 'archive', 'v2', 'q3-2024', 'team:platform', 'customer', 'runbook', 'pinned', 'review', 'todo', 'meeting',
  'release notes', 'a,b', 'say "hi"', 'back\\slash', '{braces}', 'NULL', 'null', ' spaced ', '日本語', 'émoji 🚀', 'semi;colon', "it's",
];
const EMOJIS = ['📘', '📝', '🚀', '✅', '📎', '🔒', '💡', '🧭', '📊', '🗂️', '👩🏽‍💻', '🇫🇷'];
const IMAGE_DIRS = ['/uploads/', 'uploads/', './uploads/', 'images/', '/assets/img/'];
const ATTACHMENTS = [
  'Quarterly report.pdf', 'budget-2024.xlsx', 'diagram.drawio', 'Contrat signé.pdf', '議事録.docx', 'export (1).zip', 'notes.txt',
  'slides & handout.pptx',
];

// ---------------------------------------------------------------------------------------------

export interface GenerateOptions {
  bookId: string;
  /** Documents to generate, categories included. */
  documents: number;
  seed?: number;
  /**
   * Body size scale: 6 (the default) gives the realistic distribution (HTML of a median 4 KB,
   * mean 12 KB, a heavy tail up to 500 KB: targetLength); body sizes scale linearly with it.
   */
  paragraphs?: number;
  /** Share of documents that are not active (status ≠ 1). */
  inactiveShare?: number;
}

/**
 * Target HTML length (UTF-16 units) of a body, heavy-tailed: 70% 1–6 K, 23% 6–30 K, 6% 30–120 K,
 * 1% 120–500 K (log-uniform within each band); mean about 12 K.
 */
function targetLength(rnd: () => number): number {
  const u = rnd();
  const v = rnd();
  const band = (lo: number, hi: number) => lo * Math.pow(hi / lo, v);
  if (u < 0.7) return band(1_000, 6_000);
  if (u < 0.93) return band(6_000, 30_000);
  if (u < 0.99) return band(30_000, 120_000);
  return band(120_000, 500_000);
}

function urlPart(s: string): string {
  return encodeURIComponent(s).replace(/%2F/g, '/');
}

interface BodyContext {
  rnd: () => number;
  lang: number;
  index: number;
  imageNo: number;
}

/** A sentence of the document's language; now and then one from the English pool (mixed-language text). */
function sentenceOf(c: BodyContext): Sentence {
  const pool = c.lang !== 0 && c.rnd() < 0.1 ? SENTENCES[0]! : SENTENCES[c.lang]!;
  return pool[Math.floor(c.rnd() * pool.length)]!;
}

function image(c: BodyContext): string {
  const rnd = c.rnd;
  const n = c.imageNo++;
  const r = rnd();
  const dir = IMAGE_DIRS[Math.floor(rnd() * IMAGE_DIRS.length)]!;
  const name = `${dir}${c.index.toString(36)}/img-${n}${r < 0.1 ? '%20copy' : ''}`;
  const alt = escapeAttr(TITLES[c.lang]![Math.floor(rnd() * 512)]!.text);
  if (r < 0.05) return `<p><img src="https://cdn.example.com/${c.index}/${n}.png" alt="${alt}"></p>`;
  if (r < 0.07) return `<p><img src=${name}.gif alt=icon width=16></p>`;
  if (r < 0.09) return `<p><img alt="" src='${name}.png?w=800&amp;h=600'></p>`;
  if (r < 0.1) return `<p><video src="${name}.mp4" poster="${name}-poster.jpg" controls></video></p>`;
  if (r < 0.4) {
    const srcset = `${name}-480.jpg 480w, ${name}-960.jpg 960w, ${name}.jpg 1600w`;
    return (
      `<figure><img src="${name}.jpg" srcset="${srcset}" sizes="(max-width: 600px) 480px, 960px" alt="${alt}" loading="lazy">` +
      `<figcaption>${sentenceOf(c).esc}</figcaption></figure>`
    );
  }
  return `<p><img src="${name}.png" srcset="${name}.png 1x, ${name}@2x.png 2x" alt="${alt}" width="${400 + Math.floor(rnd() * 800)}"></p>`;
}

function attachment(c: BodyContext): string {
  const rnd = c.rnd;
  const file = ATTACHMENTS[Math.floor(rnd() * ATTACHMENTS.length)]!;
  const url = `attachments/${c.index.toString(36)}/${urlPart(file)}`;
  const r = rnd();
  const label = escapeHtml(file);
  if (r < 0.4) return `<p><a href="/${url}" download>${label}</a></p>`;
  if (r < 0.7) return `<p><a href="${url}" download="${escapeAttr(file)}">📎 ${label}</a></p>`;
  return `<div class="attachment"><a data-type="attachment" href="./${url}" data-size="${Math.floor(rnd() * 5e6)}">${label}</a></div>`;
}

/** A table of `rows` rows under a header; its text has tab-separated cells. */
function table(c: BodyContext, rows: number): { html: string; text: string } {
  const rnd = c.rnd;
  const cells = CELLS[c.lang]!;
  const cols = 2 + Math.floor(rnd() * 4);
  let h = '<table><thead><tr>';
  let text = '';
  for (let j = 0; j < cols; j++) {
    const t = cells[Math.floor(rnd() * cells.length)]!;
    h += '<th>' + t.esc + '</th>';
    text += (j ? '\t' : '') + t.text;
  }
  h += '</tr></thead><tbody>';
  text += '\n';
  for (let i = 0; i < rows; i++) {
    const v = String(i + 1);
    h += '<tr><td>' + v + '</td>';
    text += v;
    for (let j = 1; j < cols; j++) {
      const t = cells[Math.floor(rnd() * cells.length)]!;
      h += '<td>' + t.esc + '</td>';
      text += '\t' + t.text;
    }
    h += '</tr>';
    text += '\n';
  }
  return { html: h + '</tbody></table>', text };
}

/** Appends blocks until the HTML reaches its target length; returns the HTML and its plain text. */
function body(c: BodyContext, target: number, withImages: boolean, withAttachments: boolean): { html: string; text: string } {
  const rnd = c.rnd;
  let html = '';
  let text = '';
  let images = 0;
  let attachments = 0;
  let heading = 0;
  const titles = TITLES[c.lang]!;
  while (html.length < target) {
    const k = rnd();
    if (k < 0.45) {
      const n = 1 + Math.floor(rnd() * 6);
      let h = '<p>';
      for (let i = 0; i < n; i++) {
        const s = sentenceOf(c);
        if (i > 0) {
          h += ' ';
          text += ' ';
        }
        h += s.rich;
        text += s.text;
      }
      html += h + '</p>';
      text += '\n';
    } else if (k < 0.55) {
      const level = 2 + Math.floor(rnd() * 3);
      const t = titles[Math.floor(rnd() * titles.length)]!;
      html += `<h${level} id="h-${heading++}">${t.esc}</h${level}>`;
      text += t.text + '\n';
    } else if (k < 0.67) {
      const n = 2 + Math.floor(rnd() * 7);
      const r = rnd();
      const [open, close, item] =
        r < 0.5 ? ['<ul>', '</ul>', '<li>'] : r < 0.8 ? ['<ol>', '</ol>', '<li>'] : ['<ul data-type="taskList">', '</ul>', ''];
      let h = open;
      for (let i = 0; i < n; i++) {
        const s = sentenceOf(c);
        h += (item || `<li data-type="taskItem" data-checked="${rnd() < 0.5}">`) + '<p>' + s.rich + '</p></li>';
        text += (item ? '- ' : '[ ] ') + s.text + '\n';
      }
      html += h + close;
    } else if (k < 0.73) {
      const t = table(c, rnd() < 0.1 ? 20 + Math.floor(rnd() * 60) : 2 + Math.floor(rnd() * 8));
      html += t.html;
      text += t.text;
    } else if (k < 0.81) {
      const i = Math.floor(rnd() * CODE.length);
      html += CODE_HTML[i]!;
      text += CODE[i]![1];
    } else if (k < 0.85) {
      const s = sentenceOf(c);
      html += '<blockquote><p>' + s.rich + '</p></blockquote>';
      text += s.text + '\n';
    } else if (k < 0.88) {
      const s = sentenceOf(c);
      html += '<div class="callout" data-callout="' + (rnd() < 0.5 ? 'info' : 'warning') + '"><p>💡 ' + s.rich + '</p></div>';
      text += '💡 ' + s.text + '\n';
    } else if (k < 0.9) {
      html += '<hr>';
    } else {
      // Links that are not media: other documents, anchors, the web, mail.
      const s = sentenceOf(c);
      const r = rnd();
      const href =
        r < 0.4 ? `../doc-${Math.floor(rnd() * 5000).toString(36)}`
        : r < 0.6 ? `#h-${Math.floor(rnd() * 4)}`
        : r < 0.9 ? `https://example.com/docs/${c.index}?ref=kb&amp;lang=en`
        : 'mailto:team@example.com';
      html += `<p>${s.rich} <a href="${href}">${titles[Math.floor(rnd() * titles.length)]!.esc}</a></p>`;
      text += s.text + '\n';
    }
    if (withImages && rnd() < 0.15) {
      html += image(c);
      images++;
    }
    if (withAttachments && rnd() < 0.04) {
      html += attachment(c);
      attachments++;
    }
  }
  if (withImages && images === 0) html += image(c);
  if (withAttachments && attachments === 0) html += attachment(c);
  return { html, text };
}

const ISO_BASE = Date.UTC(2022, 0, 3, 8, 0, 0);

interface Frame {
  id: string | null;
  /** 0 for the root, 1 for a top-level category, … */
  depth: number;
  /** Share of children that are sub-categories (0 under a document). */
  categoryRate: number;
  /** Children still to emit under this node. */
  left: number;
}

/**
 * Order keys of one book-wide list in tree (pre-)order, as a table of contents keeps them: so the
 * export's flat order (decisions.md D1) is the generation order, and siblings are in order too.
 * The shapes are those an edited list gets from fractional indexing: a few keys moved before the
 * first one (`Zx`, `Zy`, `Zz`), gaps left by deleted entries, and keys inserted between two
 * others (a fractional part, whose last digit is never 0).
 */
class OrderKeys {
  private n = 0;
  private next = 0;
  constructor(
    private readonly rnd: () => number,
    private readonly before: number,
  ) {}

  key(): string {
    const i = this.n++;
    if (i < this.before) return 'Z' + B62[62 - this.before + i];
    if (this.rnd() < 0.05) this.next += 1 + Math.floor(this.rnd() * 3);
    const key = fractionalKey(this.next++);
    if (this.rnd() < 0.08) return key + B62[Math.floor(this.rnd() * 62)] + B62[1 + Math.floor(this.rnd() * 61)];
    return key;
  }
}

function frame(id: string | null, depth: number, categoryRate: number, children: number): Frame {
  return { id, depth, categoryRate, left: children };
}

/** Share of sub-categories among the children of a category at `depth`. */
const CATEGORY_RATE = [0.75, 0.12, 0.05, 0];

function pickLang(rnd: () => number): number {
  let u = rnd();
  for (let i = 0; i < LANG_WEIGHTS.length; i++) {
    u -= LANG_WEIGHTS[i]!;
    if (u < 0) return i;
  }
  return 0;
}

function yjsState(rnd: () => number, index: number): string {
  // Stored, never exported: small bytes that still decode as base64 (seed-format.md rule 4).
  const n = 24 + Math.floor(rnd() * 96);
  const b = Buffer.allocUnsafe(n);
  b.writeUInt32BE(index >>> 0, 0);
  for (let i = 4; i < n; i++) b[i] = Math.floor(rnd() * 256);
  return b.toString('base64');
}

function pickTags(rnd: () => number): string[] | null {
  const u = rnd();
  if (u < 0.02) return [];
  if (u >= 0.55) return null;
  const n = 1 + Math.floor(rnd() * 4);
  const tags: string[] = [];
  for (let k = 0; k < n; k++) {
    // rnd² favours the common tags at the front; the odd ones at the end stay rare.
    const tag = TAGS[Math.floor(rnd() * rnd() * TAGS.length)]!;
    if (!tags.includes(tag)) tags.push(tag);
  }
  return tags;
}

function pickCover(rnd: () => number, i: number): { url: string; position: string | null } | null {
  const u = rnd();
  if (u >= 0.12) return null;
  const url =
    u < 0.03 ? `https://images.example.com/covers/${i}.jpg` : `${IMAGE_DIRS[Math.floor(rnd() * IMAGE_DIRS.length)]}covers/${i.toString(36)}.jpg`;
  return { url, position: u < 0.06 ? null : u < 0.09 ? 'top' : '50% 30%' };
}

/**
 * Yields `opts.documents` seed documents in a parents-first (pre-order) walk of the tree:
 * categories at the root holding documents and sub-categories (up to 3 levels), a few documents
 * under documents, about 1% `sheet` nodes (a table). Order keys increase strictly in the order
 * documents are yielded (OrderKeys), which is therefore the export's order. Ids are
 * `${bookId}-d${i}`. Deterministic for a given seed and options; one document in memory at a time.
 */
export function* generateDocuments(opts: GenerateOptions): Generator<SeedDocument> {
  const rnd = prng(opts.seed ?? 42);
  const scale = (opts.paragraphs ?? 6) / 6;
  const inactive = opts.inactiveShare ?? 0.05;
  const keys = new OrderKeys(rnd, Math.floor(rnd() * 4));
  const stack: Frame[] = [frame(null, 0, CATEGORY_RATE[0]!, Infinity)];
  for (let i = 0; i < opts.documents; i++) {
    while (stack[stack.length - 1]!.left === 0) stack.pop();
    const parent = stack[stack.length - 1]!;
    parent.left--;
    const id = `${opts.bookId}-d${i}`;
    const orderKey = keys.key();
    const t = rnd();
    const type = t < parent.categoryRate ? 'category' : t > 0.99 ? 'sheet' : 'document';
    const lang = pickLang(rnd);
    const c: BodyContext = { rnd, lang, index: i, imageNo: 0 };
    const created = ISO_BASE + i * 420_000 + Math.floor(rnd() * 400_000);
    const updated = rnd() < 0.2 ? created : created + Math.floor(rnd() * 90 * 86_400_000);
    const s = rnd();
    const status = s < inactive ? (s < inactive * 0.8 ? 0 : s < inactive * 0.9 ? 2 : -1) : 1;

    let contentStr: string | null = null;
    let contentHtml: string | null = null;
    if (type === 'sheet') {
      const b = table(c, 10 + Math.floor(rnd() * 200));
      contentStr = b.text;
      contentHtml = b.html;
    } else if (type === 'document') {
      const e = rnd();
      if (e < 0.005) {
        // Never edited: no body at all.
      } else if (e < 0.01) {
        contentStr = '';
        contentHtml = '<p></p>';
      } else {
        const media = rnd() < 0.5;
        const b = body(c, targetLength(rnd) * scale, media, media && rnd() < 0.6);
        contentStr = b.text;
        contentHtml = b.html;
      }
    }
    const title = TITLES[lang]![Math.floor(rnd() * 512)]!.text;
    const name = type === 'category' ? title.split(' ').slice(0, 3).join(' ') : title;
    const d = rnd();
    const theme = rnd();
    const font = rnd();
    const hasBody = contentStr !== null && contentStr !== '';
    yield {
      id,
      slug: `${(Math.imul(i + 1, 2654435761) >>> 0).toString(36)}${i.toString(36)}`,
      name,
      type,
      parentId: parent.id,
      orderKey,
      status,
      description: d < 0.4 ? sentenceOf(c).text : d < 0.41 ? '' : null,
      emojiInfo: d > 0.75 ? `{"type":"emoji","value":"${EMOJIS[Math.floor(rnd() * EMOJIS.length)]}"}` : null,
      cover: pickCover(rnd, i),
      tags: pickTags(rnd),
      themeId: theme < 0.8 ? null : theme < 0.9 ? 'serif' : 'mono',
      backgroundThemeId: theme < 0.1 ? 'paper' : theme < 0.15 ? 'dark' : null,
      bodyFontSize: font < 0.7 ? null : font < 0.85 ? 'default' : font < 0.95 ? '14' : '12',
      createdAt: new Date(created).toISOString(),
      updatedAt: new Date(updated).toISOString(),
      contentStr,
      contentHtml,
      contentYjs: hasBody ? yjsState(rnd, i) : null,
      contentJson: hasBody
        ? {
            type: 'doc',
            content: [
              { type: 'heading', attrs: { level: 1 }, content: [{ type: 'text', text: name }] },
              { type: 'paragraph', attrs: { index: i } },
            ],
          }
        : null,
    };
    if (type === 'category') {
      const depth = parent.depth + 1;
      const children = Math.floor(3 * Math.pow(depth === 1 ? 60 : 15, rnd()));
      stack.push(frame(id, depth, CATEGORY_RATE[depth] ?? 0, children));
    } else if (type === 'document' && parent.depth < 4 && rnd() < 0.03) {
      stack.push(frame(id, parent.depth + 1, 0, 1 + Math.floor(rnd() * 5)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Named sizes and what they export.

/**
 * Documents generated (categories and inactive ones included) for each named size, seed 42.
 * `large` is sized so that the default export's body (categories excluded, contentHtml included,
 * media URLs rewritten with `/media/`) is at least 2e9 bytes: measured EXACT_LARGE_BYTES below;
 * test/generate/generator.test.ts checks the lower bound (estimateExportBytes without rewriting).
 */
export const SIZES = {
  small: 100,
  medium: 20_000,
  large: 100_000,
} as const;

export type SizeName = keyof typeof SIZES;

/** The size names, smallest first. */
export const SIZE_NAMES = Object.keys(SIZES) as SizeName[];

/** Documents of a named size; throws a RangeError naming the known sizes for any other name. */
export function documentsForSize(size: string): number {
  if (!Object.hasOwn(SIZES, size)) throw new RangeError(`unknown size "${size}" (known: ${SIZE_NAMES.join(', ')})`);
  return SIZES[size as SizeName];
}

/** The export body the large size must reach (bytes). */
export const LARGE_MIN_EXPORT_BYTES = 2e9;

/** Bumped when the generator's output changes on purpose; part of generatorMarker. */
export const GENERATOR_VERSION = 2;

export interface GeneratedBookOptions {
  bookId: string;
  bookSlug: string;
  userId: string;
  documents: number;
  seed?: number;
}

/**
 * Identifies what a generated book holds: generator version, seed, document count and a hash of
 * the first documents (which changes when the generator does, even without a version bump).
 * Stored as the book's description, so a loader can tell an up-to-date book from a stale one.
 */
export function generatorMarker(opts: { documents: number; seed?: number }): string {
  const seed = opts.seed ?? 42;
  const h = createHash('sha256');
  for (const d of generateDocuments({ bookId: 'fingerprint', documents: Math.min(opts.documents, 40), seed })) h.update(JSON.stringify(d));
  const fingerprint = h.digest('hex').slice(0, 12);
  return `Generated by kb-export src/generate/generator.ts v${GENERATOR_VERSION}: seed ${seed}, ${opts.documents} documents, fingerprint ${fingerprint}`;
}

/** The book record of a generated knowledge base (seed-format.md), its description the generatorMarker. */
export function generatedBook(opts: GeneratedBookOptions): SeedBookHeader {
  return {
    id: opts.bookId,
    ownerId: opts.userId,
    slug: opts.bookSlug,
    name: `Generated knowledge base “${opts.bookSlug}”`,
    description: generatorMarker(opts),
    coverImage: 'uploads/book-cover.png',
    createdAt: '2022-01-01T00:00:00.000Z',
    updatedAt: '2024-06-30T12:00:00.000Z',
  };
}

/** The default media proxy prefix (export-api.md 2.2 rule 1, decisions.md D3.1). */
export const DEFAULT_MEDIA_PREFIX = '/media/';

const orNull = (s: string | null | undefined) => (s === null || s === undefined || s === '' ? null : s);
const orDefault = (s: string | null | undefined, def: string) => (s === null || s === undefined || s === '' ? def : s);

/**
 * The document object a default export returns for stored document `d` (export-api.md 2.2,
 * decisions.md D2 defaults, D3 rewriting with `mediaPrefix`; contentHtml left as stored when
 * `mediaPrefix` is null), fields in the order of table 2.2. Whether `d` is exported at all (status,
 * type) is the caller's business. Written from the spec, not from the server's encoder, so tests can
 * hold the server to it.
 */
export function exportedDocument(d: SeedDocument, mediaPrefix: string | null = DEFAULT_MEDIA_PREFIX): Record<string, unknown> {
  const prefix = mediaPrefix === null ? null : normalizeMediaPrefix(mediaPrefix);
  const coverUrl = orNull(d.cover?.url);
  const html = orNull(d.contentHtml);
  return {
    id: d.id,
    slug: d.slug,
    name: d.name,
    type: d.type,
    parentId: orNull(d.parentId),
    orderKey: d.orderKey,
    description: orNull(d.description),
    emojiInfo: orNull(d.emojiInfo),
    cover:
      coverUrl === null
        ? null
        : { url: prefix === null ? coverUrl : rewriteMediaUrl(coverUrl, prefix), position: orDefault(d.cover?.position, 'center') },
    tags: d.tags === null || d.tags === undefined || d.tags.length === 0 ? null : d.tags,
    themeId: orDefault(d.themeId, 'default'),
    backgroundThemeId: orDefault(d.backgroundThemeId, 'transparent'),
    bodyFontSize: orDefault(d.bodyFontSize, 'default'),
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    contentStr: orNull(d.contentStr),
    contentHtml: html === null || prefix === null ? html : rewriteHtml(html, prefix),
  };
}

/** The book object of the export for a stored book (export-api.md 2.1; coverImage as stored, D3.6). */
export function exportedBook(b: SeedBookHeader): Record<string, unknown> {
  return {
    id: b.id,
    slug: b.slug,
    name: b.name,
    description: orNull(b.description),
    coverImage: orNull(b.coverImage),
    createdAt: b.createdAt,
    updatedAt: b.updatedAt,
  };
}

export interface ExportEstimate {
  /** Documents the default export returns (active, not categories). */
  documents: number;
  /** UTF-8 bytes of the whole response body. */
  bytes: number;
}

/**
 * UTF-8 bytes of `s` as a JSON string: its own bytes plus quotes and escapes (all ASCII, so the
 * characters JSON.stringify adds are bytes). Cheaper than encoding the stringified copy, which is
 * most of an estimate's time otherwise. Assumes no lone surrogates (PostgreSQL text holds none).
 */
function jsonStringBytes(s: string): number {
  return Buffer.byteLength(s) + JSON.stringify(s).length - s.length;
}

/** UTF-8 bytes of exportedDocument(d, mediaPrefix) as JSON. */
export function exportedDocumentBytes(d: SeedDocument, mediaPrefix: string | null = DEFAULT_MEDIA_PREFIX): number {
  const doc = exportedDocument(d, mediaPrefix);
  const str = doc.contentStr as string | null;
  const html = doc.contentHtml as string | null;
  doc.contentStr = null;
  doc.contentHtml = null;
  let bytes = Buffer.byteLength(JSON.stringify(doc));
  if (str !== null) bytes += jsonStringBytes(str) - 4;
  if (html !== null) bytes += jsonStringBytes(html) - 4;
  return bytes;
}

/**
 * UTF-8 bytes of the default export's body (excludeCategories=true, includeContentHtml=true) of
 * a generated book, computed from the spec (exportedDocument). With `rewrite: false` contentHtml is
 * counted as stored: a lower bound, since rewriting only ever inserts the prefix, and several times
 * faster (no HTML tokenizer). `onProgress(generated)` is called every 1000 documents.
 */
export function estimateExportBytes(
  opts: GeneratedBookOptions & { rewrite?: boolean; mediaPrefix?: string; onProgress?: (generated: number) => void },
): ExportEstimate {
  const prefix = opts.rewrite === false ? null : opts.mediaPrefix ?? DEFAULT_MEDIA_PREFIX;
  const opening = `{"success":true,"book":${JSON.stringify(exportedBook(generatedBook(opts)))},"documents":[`;
  let bytes = Buffer.byteLength(opening);
  let count = 0;
  let i = 0;
  for (const d of generateDocuments({ bookId: opts.bookId, documents: opts.documents, seed: opts.seed ?? 42 })) {
    if (++i % 1000 === 0) opts.onProgress?.(i);
    if (d.status !== 1 || d.type === 'category') continue;
    bytes += exportedDocumentBytes(d, prefix) + (count > 0 ? 1 : 0);
    count++;
  }
  bytes += Buffer.byteLength(`],"meta":{"count":${count}}}`);
  return { documents: count, bytes };
}
