/** What the rewrite stage hands the encoder for a batch: each document's cover.url and contentHtml as exported (D3). */

/** Where a splice writes its ranges: the encoder's JsonChunker, without this stage knowing the encoder. */
export interface RangeSink {
  /** Appends `b[start, end)`. */
  pushRange(b: Buffer, start: number, end: number): void;
}

/** A splice small enough to write in one call, never paused within (plans/plan-splice.ts). */
export interface DirectPieces extends Iterable<Buffer> {
  writeTo(out: RangeSink): void;
}

/** contentHtml as exported: the stored JSON text (NULL or `""`: null, D2.1) or the pieces of its splice. */
export type ContentHtmlJson = Buffer | null | Iterable<Buffer> | DirectPieces;

export function isDirect(html: Iterable<Buffer>): html is DirectPieces {
  return typeof (html as Partial<DirectPieces>).writeTo === 'function';
}

export interface BatchRewrites {
  /** `cover.url`'s JSON text as exported; null when the document has no cover (D2.4). */
  coverUrls: (Buffer | null)[];
  contentHtml: ContentHtmlJson[];
  /** Bytes of the rows' columns, with contentHtml and cover.url as exported rather than as stored. */
  bytes: number;
}
