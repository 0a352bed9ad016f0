/**
 * HTTP calls over a real socket (undici) for the tests: status, headers, raw text and parsed JSON.
 */
import { request } from 'undici';

export type Headers = Record<string, string | string[] | undefined>;
export interface Res {
  status: number;
  headers: Headers;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface Opts {
  method?: string;
  /** `undefined`: `Bearer kbx_u1`; `null`: no Authorization header; a string: the whole header value. */
  auth?: string | null;
  headers?: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/** Sends one request; the body is read whole (these responses are small). */
export async function call(base: string, path: string, opts: Opts = {}): Promise<Res> {
  const headers: Record<string, string> = { ...opts.headers };
  const auth = opts.auth === undefined ? 'Bearer kbx_u1' : opts.auth;
  if (auth !== null) headers.authorization = auth;
  const res = await request(base + path, {
    method: (opts.method ?? 'GET') as 'GET',
    headers,
    body: opts.body,
    signal: opts.signal,
  });
  const text = await res.body.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers as Headers, text, json };
}

/** Reads a streamed body to its end or to the error that ends it: the bytes that arrived, and that error (null for a clean end). */
export async function drainBody(body: AsyncIterable<unknown>): Promise<{ bytes: Buffer; error: unknown }> {
  const chunks: Buffer[] = [];
  let error: unknown = null;
  try {
    for await (const c of body) chunks.push(c as Buffer);
  } catch (err) {
    error = err;
  }
  return { bytes: Buffer.concat(chunks), error };
}
