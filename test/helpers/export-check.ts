/**
 * What a client made of one export response, judged by the failure rules (decisions.md D6.2, D6.3,
 * D8.5): a complete body is valid and whole; an aborted one has no terminating chunk, does not
 * parse, and is a prefix of the whole body; before the first byte, an error is an envelope.
 */
import type { RawResponse } from './clients.js';

/** The acceptable outcomes. */
export type Outcome = 'complete' | 'aborted' | '500 EXPORT_FAILED' | '503 SERVICE_UNAVAILABLE';

export type Verdict = { ok: true; outcome: Outcome } | { ok: false; problem: string };

export interface Expected {
  /** Document ids of the whole export, in order. */
  ids: string[];
  /** The whole body of the same export, to compare an aborted body's bytes with; optional. */
  body?: Buffer;
}

function envelope(res: RawResponse): { code?: unknown; success?: unknown } | undefined {
  try {
    return JSON.parse(res.body.toString('utf8')) as { code?: unknown; success?: unknown };
  } catch {
    return undefined;
  }
}

/** Judges one response; `problem` says what was wrong, for the assertion message. */
export function judgeExport(res: RawResponse, expected: Expected): Verdict {
  const bad = (problem: string): Verdict => ({
    ok: false,
    problem: `${problem} (status ${res.status}, ${res.body.length} body bytes)`,
  });
  if (res.status === 200) {
    if (!res.complete) {
      let parsed = true;
      try {
        JSON.parse(res.body.toString('utf8'));
      } catch {
        parsed = false;
      }
      if (parsed) return bad('an aborted body parses as JSON');
      if (expected.body && !expected.body.subarray(0, res.body.length).equals(res.body)) {
        return bad('an aborted body is not a prefix of the whole export');
      }
      return { ok: true, outcome: 'aborted' };
    }
    let doc: { success?: unknown; documents?: { id: string }[]; meta?: { count?: unknown } };
    try {
      doc = JSON.parse(res.body.toString('utf8')) as typeof doc;
    } catch {
      return bad('a terminated body does not parse');
    }
    const ids = (doc.documents ?? []).map((d) => d.id);
    if (doc.success !== true) return bad('a terminated body without success: true');
    if (doc.meta?.count !== ids.length)
      return bad(`meta.count ${String(doc.meta?.count)} != documents.length ${ids.length}`);
    if (ids.length !== expected.ids.length || ids.join('\n') !== expected.ids.join('\n')) {
      return bad(`a terminated body with ${ids.length} documents, not the ${expected.ids.length} expected in order`);
    }
    return { ok: true, outcome: 'complete' };
  }
  const env = envelope(res);
  if (!res.complete || env?.success !== false) return bad('an error status without a whole JSON envelope');
  if (res.status === 500 && env.code === 'EXPORT_FAILED') return { ok: true, outcome: '500 EXPORT_FAILED' };
  if (res.status === 503 && env.code === 'SERVICE_UNAVAILABLE') {
    if (!(Number(res.headers['retry-after']) > 0)) return bad('503 without Retry-After');
    return { ok: true, outcome: '503 SERVICE_UNAVAILABLE' };
  }
  return bad(`unexpected error ${String(env.code)}`);
}

/** Counts of outcomes, for a t.comment. */
export function tally(outcomes: Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) counts.set(o, (counts.get(o) ?? 0) + 1);
  return [...counts].map(([o, n]) => `${o}: ${n}`).join(', ');
}
