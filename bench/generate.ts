/**
 * A deterministic generator (seeded PRNG) of realistic knowledge bases: a tree of categories and
 * documents with fractional-index-style order keys, HTML bodies of varied length where about half
 * the documents carry relative images and attachments, unicode text, tags, covers, and a share of
 * inactive documents. Used by the demo (`npm start`), the tests and the benchmarks.
 */
import type { SeedDocument } from '../src/load/seed-types.js';

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

const WORDS = (
  'export stream cursor snapshot backpressure index knowledge base document category order key ' +
  'proxy media chunk encoder rewriter batch socket drain commit transaction replica backup search ' +
  'naïve café Straße 日本語 документ κόσμος 🚀 emoji ünïcödé ✓ "quoted" back\\slash tab\tend'
).split(' ');

const B62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Fixed-width base-62 key for the n-th sibling, so byte-wise order is numeric order (decisions.md D1.1). */
export function orderKeyFor(n: number, width = 5): string {
  let s = '';
  for (let i = 0; i < width; i++) {
    s = B62[n % 62] + s;
    n = Math.floor(n / 62);
  }
  return 'a' + s;
}

export interface GenerateOptions {
  bookId: string;
  /** Documents to generate, categories included. */
  documents: number;
  seed?: number;
  /** Average paragraphs per body; bodies vary from a line to many kilobytes. */
  paragraphs?: number;
  /** Share of documents that are not active (status 0). */
  inactiveShare?: number;
}

function sentence(rnd: () => number, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]!);
  return out.join(' ');
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function body(rnd: () => number, i: number, paragraphs: number): { html: string; text: string } {
  const html: string[] = [];
  const text: string[] = [];
  const n = 1 + Math.floor(rnd() * paragraphs * 2);
  const withMedia = rnd() < 0.5;
  for (let p = 0; p < n; p++) {
    const s = sentence(rnd, 8 + Math.floor(rnd() * 40));
    text.push(s);
    const kind = rnd();
    if (kind < 0.1) html.push(`<h2 id="h${p}">${escapeHtml(s.slice(0, 40))}</h2>`);
    else if (kind < 0.2) html.push(`<ul><li>${escapeHtml(s)}</li><li>${escapeHtml(s.slice(0, 20))}</li></ul>`);
    else if (kind < 0.27) html.push(`<table><tr><th>key</th><th>value</th></tr><tr><td>${i}</td><td>${escapeHtml(s)}</td></tr></table>`);
    else if (kind < 0.34) html.push(`<pre><code class="language-ts">const x = ${p} &lt; ${i}; // ${escapeHtml(s.slice(0, 30))}</code></pre>`);
    else if (kind < 0.4) html.push(`<p>See <a href="doc-${(i + p) % 97}">another document</a> or <a href="https://example.com/${p}">the web</a>.</p>`);
    else html.push(`<p>${escapeHtml(s)}</p>`);
    if (withMedia && p % 3 === 0) {
      html.push(
        `<p><img src="uploads/${i}/img-${p}.png" alt="figure ${p}" srcset="uploads/${i}/img-${p}.png 1x, ./uploads/${i}/img-${p}@2x.png 2x"></p>`,
      );
      if (p % 2 === 0) html.push(`<p><a href="/files/${i}/attachment-${p}.pdf" download>attachment.pdf</a></p>`);
    }
  }
  return { html: html.join('\n'), text: text.join('\n') };
}

/**
 * Yields `opts.documents` seed documents in a parents-first order. Every 20th node is a category;
 * the others hang under the most recent category (or the root). Deterministic for a given seed.
 */
export function* generateDocuments(opts: GenerateOptions): Generator<SeedDocument> {
  const rnd = prng(opts.seed ?? 42);
  const paragraphs = opts.paragraphs ?? 6;
  const inactive = opts.inactiveShare ?? 0.05;
  let category: string | null = null;
  const base = Date.UTC(2024, 0, 1);
  for (let i = 0; i < opts.documents; i++) {
    const id = `${opts.bookId}-d${i}`;
    const isCategory = i % 20 === 0;
    const created = new Date(base + i * 60_000).toISOString();
    const updated = new Date(base + i * 60_000 + Math.floor(rnd() * 86_400_000)).toISOString();
    const b = isCategory ? null : body(rnd, i, paragraphs);
    const r = rnd();
    yield {
      id,
      slug: `doc-${i}`,
      name: isCategory ? `Section ${i / 20}` : sentence(rnd, 2 + Math.floor(rnd() * 5)),
      type: isCategory ? 'category' : 'document',
      parentId: isCategory ? null : category,
      orderKey: orderKeyFor(i),
      status: rnd() < inactive ? 0 : 1,
      description: r < 0.5 ? sentence(rnd, 10) : null,
      emojiInfo: r < 0.3 ? '{"icon":"📘"}' : null,
      cover: r < 0.2 ? { url: `covers/${i}.jpg`, position: r < 0.1 ? null : 'top' } : null,
      tags: r < 0.6 ? [WORDS[i % WORDS.length]!, 'generated'] : null,
      themeId: r < 0.5 ? null : 'serif',
      backgroundThemeId: r < 0.7 ? null : 'paper',
      bodyFontSize: (['default', '14', '12', null] as const)[i % 4]!,
      createdAt: created,
      updatedAt: updated,
      contentStr: b ? b.text : null,
      contentHtml: b ? b.html : null,
      contentYjs: b ? Buffer.from(`yjs-state-${i}`).toString('base64') : null,
      contentJson: b ? { type: 'doc', content: [{ type: 'paragraph', i }] } : null,
    };
    if (isCategory) category = id;
  }
}
