/**
 * D3.3's table, the one both sides read: which attributes of which elements hold media URLs that
 * this service rewrites, how an `a` qualifies, and the pre-check that finds no such element. The
 * server's rewriter (html-rewriter.ts) rewrites them; the backup client (src/backup/media-scan.ts)
 * collects the same values from an export to save the media they name. Nothing here imports the
 * server: only srcset.ts, to split a srcset the way the rewriter does.
 */
import { mapSrcsetRanges } from './srcset.js';

/** How an attribute's value holds URLs: one URL, or a srcset's candidates. */
export type AttrKind = 'url' | 'srcset';

/** Element -> attributes rewritten (`a` only as an attachment link: isAttachmentLink) (D3.3). */
export const REWRITTEN_ATTRS: ReadonlyMap<string, ReadonlyMap<string, AttrKind>> = new Map([
  [
    'img',
    new Map<string, AttrKind>([
      ['src', 'url'],
      ['srcset', 'srcset'],
    ]),
  ],
  [
    'source',
    new Map<string, AttrKind>([
      ['src', 'url'],
      ['srcset', 'srcset'],
    ]),
  ],
  [
    'video',
    new Map<string, AttrKind>([
      ['src', 'url'],
      ['poster', 'url'],
    ]),
  ],
  ['audio', new Map<string, AttrKind>([['src', 'url']])],
  ['track', new Map<string, AttrKind>([['src', 'url']])],
  ['embed', new Map<string, AttrKind>([['src', 'url']])],
  ['object', new Map<string, AttrKind>([['data', 'url']])],
  ['a', new Map<string, AttrKind>([['href', 'url']])],
]);

/** Whether an `a` start tag's attributes make it an attachment link: `download`, or `data-type="attachment"` (D3.3). */
export function isAttachmentLink(attrs: readonly { name: string; value: string }[]): boolean {
  for (const attr of attrs) {
    if (attr.name === 'download') return true;
    if (attr.name === 'data-type' && attr.value === 'attachment') return true;
  }
  return false;
}

/**
 * The attributes whose values are rewritten for a start tag (parse5's lower-case name, decoded
 * attributes), or undefined when none are: an element outside the table, an `a` that is no
 * attachment link, or an element left in foreign content (`<svg><video>` is not HTML media) (D3.3).
 */
export function rewrittenAttrsOf(
  tagName: string,
  attrs: readonly { name: string; value: string }[],
  foreign: boolean,
): ReadonlyMap<string, AttrKind> | undefined {
  if (foreign) return undefined;
  const rules = REWRITTEN_ATTRS.get(tagName);
  if (rules === undefined) return undefined;
  if (tagName === 'a' && !isAttachmentLink(attrs)) return undefined;
  return rules;
}

/** The candidate URLs of a srcset value, split as the rewriter splits it (srcset.ts), in order. */
export function srcsetUrls(value: string): string[] {
  const urls: string[] = [];
  mapSrcsetRanges(value, (v, start, end) => {
    if (end > start) urls.push(v.slice(start, end));
    return null;
  });
  return urls;
}

/** The media tag names as they may be written after `<` (`image` is parsed as `img`); `a` is gated apart (D3.3). */
const MEDIA_TAG_NAMES = [...REWRITTEN_ATTRS.keys(), 'image'].filter((name) => name !== 'a').join('|');
const ANCHOR_MARKERS = /download|data-type/i;

/**
 * A pre-check with no false negatives, for text where a tag name ends at one of `terminators`
 * (a character class body): a media tag name after `<`, or an `a` with `download` or `data-type`
 * somewhere. False means no value of the table can be in the text (D3.3).
 */
export function mediaPreCheck(terminators: string): (text: string) => boolean {
  const media = new RegExp(`<(?:${MEDIA_TAG_NAMES})(?:[${terminators}]|$)`, 'i');
  const anchor = new RegExp(`<a(?:[${terminators}]|$)`, 'i');
  return (text) => media.test(text) || (ANCHOR_MARKERS.test(text) && anchor.test(text));
}

/** The pre-check on HTML text: false when it cannot hold a value of the table (D3.3). */
export const mayNeedRewrite = mediaPreCheck('\\t\\n\\f\\r />');
