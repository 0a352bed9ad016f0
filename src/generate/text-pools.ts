/** The generator's fixed pools of text; a document's seed only picks from them. */
import { prng } from './random.js';

export function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function escapeAttr(s: string): string {
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
  '"quoted"',
  "it's",
  "don't",
  'R&D',
  'Q&A',
  'a<b',
  'x > y',
  'C:\\Users\\docs',
  '—',
  '–',
  '…',
  '“smart quotes”',
  '‘single’',
  '©',
  '™',
  '€20',
  '£5',
  '20°C',
  '½',
  '3×',
  '→',
  '✓',
  '•',
  'naïve',
  'café',
  'résumé',
  'Straße',
  'Zürich',
  '🚀',
  '✅',
  '👍🏽',
  '👨‍👩‍👧',
  '🇯🇵',
  '❤️',
  'e\u0301',
  'non\u00a0breaking',
  'zero\u200bwidth',
  'مرحبا',
  'שלום',
  'ﬁ',
  '<tag>',
  '&amp;',
  'a\\b',
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
    words:
      'ドキュメント 知識 検索 書き出し バックアップ 利用者 会議 手順 テンプレート 更新 確認 設定 の は を に が で と'.split(
        ' ',
      ),
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
export const LANG_WEIGHTS = [0.8, 0.05, 0.04, 0.05, 0.03, 0.03];

export interface Sentence {
  text: string;
  esc: string;
  rich: string;
}

function pick<T>(rnd: () => number, a: readonly T[]): T {
  return a[Math.floor(rnd() * a.length)]!;
}

function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

function makeSentence(
  rnd: () => number,
  lang: Lang,
  index: number,
  minWords: number,
  maxWords: number,
  stop: boolean,
): Sentence {
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
      r < 0.1
        ? ['<strong>', '</strong>']
        : r < 0.17
          ? ['<em>', '</em>']
          : r < 0.22
            ? ['<code>', '</code>']
            : r < 0.26
              ? [`<a href="https://example.com/wiki/${index}" target="_blank" rel="noopener">`, '</a>']
              : [`<a href="../guide-${index % 50}">`, '</a>'];
    const before = words.slice(0, at).map(escapeHtml).join(lang.sep);
    const after = words
      .slice(at + 1)
      .map(escapeHtml)
      .join(lang.sep);
    rich = before + lang.sep + open + w + close + lang.sep + after + escapeHtml(end);
  }
  return { text, esc, rich };
}

interface SentencePools {
  sentences: Sentence[][];
  titles: Sentence[][];
  cells: Sentence[][];
}

let built: SentencePools | undefined;

/** The sentence pools, built on first use from their own seed, so every process gives the same documents. */
export function sentencePools(): SentencePools {
  if (built) return built;
  const rnd = prng(0x5eed);
  const sentences = LANGS.map((lang, li) =>
    Array.from({ length: li === 0 ? 4096 : 512 }, (_, i) => makeSentence(rnd, lang, i, 4, 22, true)),
  );
  const titles = LANGS.map((lang) => Array.from({ length: 512 }, (_, i) => makeSentence(rnd, lang, i, 1, 6, false)));
  const cells = LANGS.map((lang) => Array.from({ length: 256 }, (_, i) => makeSentence(rnd, lang, i, 1, 4, false)));
  built = { sentences, titles, cells };
  return built;
}

/** Code blocks: language tag and source text (with tabs, backslashes, quotes, `<`, `&` and blank lines). */
export const CODE: [string, string][] = (
  [
    [
      'typescript',
      [
        "import { stream } from './export.js';",
        '',
        'export async function run(sql: Sql): Promise<void> {',
        '  const rows = await sql`SELECT id FROM documents WHERE status = ${1}`;',
        '  for (const r of rows) console.log(`id: ${r.id}`);',
        '}',
      ],
    ],
    [
      'sql',
      [
        'SELECT d.id, d.name',
        'FROM documents d',
        "WHERE d.book_id = $1 AND d.status = 1 AND d.name LIKE '%\\_draft%' ESCAPE '\\'",
        'ORDER BY d.order_key, d.id;',
      ],
    ],
    [
      'bash',
      [
        '#!/usr/bin/env bash',
        'set -euo pipefail',
        'for f in ./backups/*.json; do',
        '  gzip -9 "$f" && echo "compressed: $f"',
        'done',
        'curl -H "Authorization: Bearer $KEY" "$BASE/api/v1/open/books/handbook/docs" > out.json',
      ],
    ],
    [
      'go',
      [
        'package main',
        '',
        'import "fmt"',
        '',
        'func main() {',
        '\tfor i := 0; i < 3; i++ {',
        '\t\tfmt.Printf("row %d\\t%s\\n", i, "ok")',
        '\t}',
        '}',
      ],
    ],
    [
      'python',
      [
        'def parse(line: str) -> dict:',
        '    """Split a tab-separated line."""',
        '    key, _, value = line.partition("\\t")',
        '    return {"key": key, "value": value.strip()}',
        '',
        'print(parse("a\\tb"))',
      ],
    ],
    [
      'json',
      [
        '{',
        '  "name": "kb-export",',
        '  "paths": ["C:\\\\data\\\\kb", "/var/lib/kb"],',
        '  "unicode": "naïve — 日本語 🚀",',
        '  "nested": { "ok": true, "n": 42 }',
        '}',
      ],
    ],
    [
      'html',
      [
        '<figure>',
        '  <img src="uploads/diagram.png" alt="diagram">',
        '  <figcaption>Not a real tag: it is escaped text &amp; stays as stored</figcaption>',
        '</figure>',
      ],
    ],
    ['makefile', ['build:', '\tnpm run build', '', 'test: build', '\tnpm test -- --reporter=dot']],
    [
      'text',
      [
        '2024-03-01T10:00:00.000Z INFO  export started book=handbook',
        '2024-03-01T10:00:01.250Z WARN  slow client, waiting for drain',
        '2024-03-01T10:00:09.004Z INFO  export finished documents=18233 bytes=1.9GB',
      ],
    ],
    ['regex', ['^(?<scheme>[A-Za-z][A-Za-z0-9+.-]*):\\/\\/(?<host>[^\\/\\s]+)(?<path>\\/\\S*)?$']],
  ] as [string, string[]][]
).map(([lang, lines]) => [lang, lines.join('\n') + '\n']);
export const CODE_HTML = CODE.map(
  ([lang, src]) => `<pre><code class="language-${lang}">${escapeHtml(src)}</code></pre>`,
);

/** Tags, a few of which need quoting in a PostgreSQL array literal or escaping in JSON. */
export const TAGS = [
  'how-to',
  'reference',
  'onboarding',
  'api',
  'release-notes',
  'internal',
  'draft',
  'faq',
  'security',
  'ops',
  'design',
  'legal',
  'hr',
  'finance',
  'archive',
  'v2',
  'q3-2024',
  'team:platform',
  'customer',
  'runbook',
  'pinned',
  'review',
  'todo',
  'meeting',
  'release notes',
  'a,b',
  'say "hi"',
  'back\\slash',
  '{braces}',
  'NULL',
  'null',
  ' spaced ',
  '日本語',
  'émoji 🚀',
  'semi;colon',
  "it's",
];
export const EMOJIS = ['📘', '📝', '🚀', '✅', '📎', '🔒', '💡', '🧭', '📊', '🗂️', '👩🏽‍💻', '🇫🇷'];
export const IMAGE_DIRS = ['/uploads/', 'uploads/', './uploads/', 'images/', '/assets/img/'];
export const ATTACHMENTS = [
  'Quarterly report.pdf',
  'budget-2024.xlsx',
  'diagram.drawio',
  'Contrat signé.pdf',
  '議事録.docx',
  'export (1).zip',
  'notes.txt',
  'slides & handout.pptx',
];
