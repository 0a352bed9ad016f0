/**
 * One media file fetched with undici into a temporary file of the media folder (media-store.ts):
 * up to MAX_REDIRECTS redirects followed by hand (a media proxy may send the client to presigned
 * object-store URLs on another origin), the API key sent to the server's own origin only and
 * dropped for good once a redirect leaves it; retried while it can still succeed (408, 425, 429,
 * 5xx, a connection refused or reset, a body cut short or stalled past the timeout), waiting for
 * `Retry-After` when the answer has one and backing off otherwise; any other answer (404, 403…)
 * is final. The body streams to disk through a hash: memory does not grow with the file.
 */
import { STATUS_CODES } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import { decoder } from './body-streams.js';
import { header } from './download.js';
import { MediaStoreError, RefusedPath, type TempFile } from './media-store.js';

/** Redirects followed for one fetch; one more is a failure. */
export const MAX_REDIRECTS = 5;
const REDIRECT = new Set([301, 302, 303, 307, 308]);
/** Answers that can change if asked again. */
const RETRYABLE = new Set([408, 425, 429, 500, 502, 503, 504]);
/** The longest Retry-After waited for; a longer one is waited this long. */
const RETRY_AFTER_CAP_MS = 60_000;
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 30_000;

export interface MediaFetchOptions {
  /** The API key, sent as `Authorization: Bearer` to `serverOrigin` only. */
  key: string;
  /** The origin of `--server` (`http://host:port`). */
  serverOrigin: string;
  /** Attempts after the first. */
  retries: number;
  /** The longest wait for an answer's headers, and for more of its body, milliseconds. */
  timeoutMs: number;
  dispatcher: Dispatcher;
  /** Aborts requests and waits once the command stops. */
  signal: AbortSignal;
}

/** A fetched file, still under its temporary name, or why there is none (`status`: the last HTTP status, null without one). */
export type Fetched =
  | { ok: true; temp: TempFile; bytes: number; sha256: string; contentType: string | null; attempts: number }
  | { ok: false; status: number | null; why: string; attempts: number };

type Attempt =
  | { ok: true; temp: TempFile; bytes: number; sha256: string; contentType: string | null }
  | { ok: false; status: number | null; why: string; retry: boolean; retryAfterMs: number | null };

/** `Retry-After` in milliseconds (seconds or an HTTP date), or null when absent or unreadable. */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | null {
  if (value === undefined || value.trim() === '') return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds * 1000 : null;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

const statusText = (status: number) => `${status} ${STATUS_CODES[status] ?? ''}`.trim();

/**
 * Fetches `url` into a temporary file made by `openTemp`; the caller renames it (or discards it).
 * Resolves with the failure when the URL cannot be fetched; throws MediaStoreError when the
 * folder cannot take the file, and the abort's error once `o.signal` aborts.
 */
export async function fetchMedia(url: URL, o: MediaFetchOptions, openTemp: () => Promise<TempFile>): Promise<Fetched> {
  for (let attempt = 1; ; attempt++) {
    const r = await attemptOnce(url, o, openTemp);
    if (r.ok) return { ...r, attempts: attempt };
    if (!r.retry || attempt > o.retries) {
      const tries = attempt === 1 ? '' : ` after ${attempt} attempts`;
      return { ok: false, status: r.status, why: `${r.why}${tries}`, attempts: attempt };
    }
    const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** (attempt - 1)) * (1 + Math.random() / 2);
    await sleep(r.retryAfterMs !== null ? Math.min(r.retryAfterMs, RETRY_AFTER_CAP_MS) : backoff, undefined, {
      signal: o.signal,
    });
  }
}

async function attemptOnce(start: URL, o: MediaFetchOptions, openTemp: () => Promise<TempFile>): Promise<Attempt> {
  let url = start;
  // The key goes to the server's origin only, and never again once a redirect has left it.
  let withKey = url.origin === o.serverOrigin;
  for (let hop = 0; ; hop++) {
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        method: 'GET',
        dispatcher: o.dispatcher,
        signal: o.signal,
        headers: {
          accept: '*/*',
          'accept-encoding': 'identity',
          ...(withKey ? { authorization: `Bearer ${o.key}` } : {}),
        },
        headersTimeout: o.timeoutMs,
        bodyTimeout: o.timeoutMs,
      });
    } catch (err) {
      if (o.signal.aborted) throw err;
      return { ok: false, status: null, why: (err as Error).message, retry: true, retryAfterMs: null };
    }
    const status = res.statusCode;
    if (REDIRECT.has(status)) {
      await res.body.dump().catch(() => {});
      const location = header(res.headers.location);
      if (location === undefined)
        return { ok: false, status, why: `${statusText(status)} without a Location`, retry: false, retryAfterMs: null };
      if (hop === MAX_REDIRECTS)
        return { ok: false, status, why: `more than ${MAX_REDIRECTS} redirects`, retry: false, retryAfterMs: null };
      let next: URL;
      try {
        next = new URL(location, url);
      } catch {
        return { ok: false, status, why: `a redirect to "${location}", not a URL`, retry: false, retryAfterMs: null };
      }
      if (next.protocol !== 'http:' && next.protocol !== 'https:')
        return { ok: false, status, why: `a redirect to a ${next.protocol} URL`, retry: false, retryAfterMs: null };
      if (next.origin !== url.origin) withKey = false;
      next.hash = '';
      url = next;
      continue;
    }
    if (status !== 200) {
      const after = retryAfterMs(header(res.headers['retry-after']));
      await res.body.dump().catch(() => {});
      return { ok: false, status, why: statusText(status), retry: RETRYABLE.has(status), retryAfterMs: after };
    }
    return receive(res, o, openTemp);
  }
}

async function receive(
  res: Dispatcher.ResponseData,
  o: MediaFetchOptions,
  openTemp: () => Promise<TempFile>,
): Promise<Attempt> {
  let temp: TempFile;
  try {
    temp = await openTemp();
  } catch (err) {
    res.body.destroy();
    throw err;
  }
  const length = Number(header(res.headers['content-length']));
  const encoding = (header(res.headers['content-encoding']) ?? 'identity').trim().toLowerCase();
  try {
    // Asked for identity; a server that compresses anyway is decoded, so the file holds the media's own bytes.
    const body = encoding === 'identity' ? res.body : res.body.pipe(decoder(encoding));
    if (body !== res.body) res.body.on('error', (err) => body.destroy(err));
    const { bytes, sha256 } = await temp.write(body);
    if (encoding === 'identity' && Number.isSafeInteger(length) && bytes !== length) {
      await temp.discard();
      return {
        ok: false,
        status: 200,
        why: `the body ended after ${bytes} of ${length} bytes`,
        retry: true,
        retryAfterMs: null,
      };
    }
    return { ok: true, temp, bytes, sha256, contentType: header(res.headers['content-type']) ?? null };
  } catch (err) {
    res.body.destroy();
    await temp.discard();
    if (err instanceof MediaStoreError || o.signal.aborted) throw err;
    if (err instanceof RefusedPath)
      return { ok: false, status: 200, why: err.message, retry: false, retryAfterMs: null };
    return {
      ok: false,
      status: 200,
      why: `the body was cut: ${(err as Error).message}`,
      retry: true,
      retryAfterMs: null,
    };
  }
}
