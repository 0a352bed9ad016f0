/**
 * Raw HTTP/1.1 over node:net, for what no client library sends: malformed request lines, huge or
 * missing headers, bodies that never finish, requests that trickle in. Reports the answer as the
 * bytes came and when the server closed the connection.
 */
import { connect } from 'node:net';

export interface RawAnswer {
  /** Everything the server sent. */
  raw: string;
  /** Of the first response; undefined when nothing came. */
  status: number | undefined;
  /** Lower-cased names. */
  headers: Record<string, string>;
  body: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
  /** Milliseconds from connecting until the server closed the connection; undefined if it did not before the deadline. */
  closedAfterMs: number | undefined;
  /** The socket's first error code (ECONNRESET, EPIPE), if any. */
  error: string | undefined;
}

export interface RawOptions {
  /** After `data`, these bytes again every `everyMs` while the connection is open. */
  trickle?: { bytes: string; everyMs: number };
  /** Reads nothing for this long, then stops trickling and reads: a busy client that reads late. */
  readAfterMs?: number;
  /** The socket is destroyed after this long if the server has not closed it (default 10 s). */
  deadlineMs?: number;
}

/** Parses the first response of `raw` (status line, headers, Content-Length body). */
export function parseResponse(raw: string): Omit<RawAnswer, 'raw' | 'closedAfterMs' | 'error'> {
  const end = raw.indexOf('\r\n\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(raw);
  if (end < 0 || !m) return { status: undefined, headers: {}, body: '', json: undefined };
  const headers: Record<string, string> = {};
  for (const line of raw.slice(0, end).split('\r\n').slice(1)) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? NaN);
  const body = Number.isNaN(length) ? raw.slice(end + 4) : raw.slice(end + 4, end + 4 + length);
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: Number(m[1]), headers, body, json };
}

/** Connects to 127.0.0.1:`port`, writes `data` (then trickles), and resolves once the connection closes or the deadline passes. */
export function rawRequest(port: number, data: string | Buffer, opts: RawOptions = {}): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const started = Date.now();
    const chunks: Buffer[] = [];
    let closedAfterMs: number | undefined;
    let error: string | undefined;
    let timer: NodeJS.Timeout | undefined;
    // Writes after the server closed may fail (EPIPE, ECONNRESET): what came before still counts.
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error ??= err.code;
    });
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('connect', () => {
      if (opts.readAfterMs !== undefined) socket.pause();
      socket.write(data);
      if (opts.trickle) {
        const { bytes, everyMs } = opts.trickle;
        timer = setInterval(() => {
          if (!socket.destroyed && socket.writable) socket.write(bytes);
        }, everyMs);
      }
      if (opts.readAfterMs !== undefined) {
        setTimeout(() => {
          clearInterval(timer);
          socket.resume();
        }, opts.readAfterMs);
      }
    });
    let gaveUp = false;
    const deadline = setTimeout(() => {
      gaveUp = true;
      socket.destroy();
    }, opts.deadlineMs ?? 10_000);
    // The server's FIN, or its reset when a trickled write arrived after it closed.
    socket.on('end', () => {
      closedAfterMs ??= Date.now() - started;
    });
    socket.on('close', () => {
      if (!gaveUp) closedAfterMs ??= Date.now() - started;
      clearTimeout(deadline);
      clearInterval(timer);
      const raw = Buffer.concat(chunks).toString('latin1');
      resolve({ raw, ...parseResponse(raw), closedAfterMs, error });
    });
  });
}

/** The port of a `http://host:port` base URL. */
export function portOf(base: string): number {
  return Number(new URL(base).port);
}
