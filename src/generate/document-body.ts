/** HTML bodies of generated documents, with their plain text, built from pool strings (docs/architecture.md). */
import {
  ATTACHMENTS,
  CODE,
  CODE_HTML,
  escapeAttr,
  escapeHtml,
  IMAGE_DIRS,
  sentencePools,
  type Sentence,
} from './text-pools.js';

/** Target HTML length (UTF-16 units), heavy-tailed: 70% 1–6 K, 23% 6–30 K, 6% 30–120 K, 1% 120–500 K; mean ~12 K. */
export function targetLength(rnd: () => number): number {
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

export interface BodyContext {
  rnd: () => number;
  lang: number;
  index: number;
  imageNo: number;
}

/** A sentence of the document's language; now and then one from the English pool (mixed-language text). */
export function sentenceOf(c: BodyContext): Sentence {
  const pool = c.lang !== 0 && c.rnd() < 0.1 ? sentencePools().sentences[0]! : sentencePools().sentences[c.lang]!;
  return pool[Math.floor(c.rnd() * pool.length)]!;
}

function image(c: BodyContext): string {
  const rnd = c.rnd;
  const n = c.imageNo++;
  const r = rnd();
  const dir = IMAGE_DIRS[Math.floor(rnd() * IMAGE_DIRS.length)]!;
  const name = `${dir}${c.index.toString(36)}/img-${n}${r < 0.1 ? '%20copy' : ''}`;
  const alt = escapeAttr(sentencePools().titles[c.lang]![Math.floor(rnd() * 512)]!.text);
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

export function table(c: BodyContext, rows: number): { html: string; text: string } {
  const rnd = c.rnd;
  const cells = sentencePools().cells[c.lang]!;
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
export function body(
  c: BodyContext,
  target: number,
  withImages: boolean,
  withAttachments: boolean,
): { html: string; text: string } {
  const rnd = c.rnd;
  let html = '';
  let text = '';
  let images = 0;
  let attachments = 0;
  let heading = 0;
  const titles = sentencePools().titles[c.lang]!;
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
        r < 0.5
          ? ['<ul>', '</ul>', '<li>']
          : r < 0.8
            ? ['<ol>', '</ol>', '<li>']
            : ['<ul data-type="taskList">', '</ul>', ''];
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
      html +=
        '<div class="callout" data-callout="' + (rnd() < 0.5 ? 'info' : 'warning') + '"><p>💡 ' + s.rich + '</p></div>';
      text += '💡 ' + s.text + '\n';
    } else if (k < 0.9) {
      html += '<hr>';
    } else {
      // Links that are not media: other documents, anchors, the web, mail.
      const s = sentenceOf(c);
      const r = rnd();
      const href =
        r < 0.4
          ? `../doc-${Math.floor(rnd() * 5000).toString(36)}`
          : r < 0.6
            ? `#h-${Math.floor(rnd() * 4)}`
            : r < 0.9
              ? `https://example.com/docs/${c.index}?ref=kb&amp;lang=en`
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
