/** A deterministic generator of realistic knowledge bases, for the demo, tests and benchmarks (docs/architecture.md). */
import type { SeedDocument } from '../load/seed-types.js';
import { body, sentenceOf, table, targetLength, type BodyContext } from './document-body.js';
import { B62, fractionalKey, prng } from './random.js';
import { EMOJIS, IMAGE_DIRS, LANG_WEIGHTS, sentencePools, TAGS } from './text-pools.js';

interface GenerateOptions {
  bookId: string;
  documents: number;
  seed?: number;
  /** Body size scale: 6 (the default) gives targetLength's realistic distribution; sizes scale linearly. */
  paragraphs?: number;
  /** Share of documents that are not active (status ≠ 1). */
  inactiveShare?: number;
}

const ISO_BASE = Date.UTC(2022, 0, 3, 8, 0, 0);

interface Frame {
  id: string | null;
  depth: number;
  /** Share of children that are sub-categories (0 under a document). */
  categoryRate: number;
  left: number;
}

/** Book-wide order keys in pre-order (the export's order, D1), shaped as fractional indexing leaves an edited list. */
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
    u < 0.03
      ? `https://images.example.com/covers/${i}.jpg`
      : `${IMAGE_DIRS[Math.floor(rnd() * IMAGE_DIRS.length)]}covers/${i.toString(36)}.jpg`;
  return { url, position: u < 0.06 ? null : u < 0.09 ? 'top' : '50% 30%' };
}

/** `opts.documents` seed documents in pre-order, order keys increasing; deterministic, one in memory at a time. */
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
    const title = sentencePools().titles[lang]![Math.floor(rnd() * 512)]!.text;
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
