/**
 * HTTP clients that misbehave on a real socket (node:net), for the fault tests: one that reads a
 * whole response and says whether its chunked body was terminated, one that hangs up after N bytes,
 * and one that reads at a set rate by pausing its socket so the kernel's buffers fill as they would
 * for a slow reader. Each speaks HTTP/1.1 with `Connection: close`, so the server's close ends the
 * exchange.
 */
import net from 'node:net';

export type RequestHeaders = Record<string, string>;

export interface RawResponse {
  /** Every byte received, headers included. */
  raw: Buffer;
  /** 0 when no status line arrived. */
  status: number;
  /** Lower-cased names. */
  headers: Record<string, string>;
  /** The body, de-chunked when chunked (as far as it arrived). */
  body: Buffer;
  /**
   * Whether the body arrived whole: for a chunked body, the terminating 0-length chunk (and its
   * final CRLF) was received; for a Content-Length body, that many bytes.
   */
  complete: boolean;
}

/** Parses what arrived of one HTTP/1.1 response; tolerant of a cut anywhere. */
export function parseRaw(raw: Buffer): RawResponse {
  const head = raw.indexOf('\r\n\r\n');
  if (head === -1) return { raw, status: 0, headers: {}, body: Buffer.alloc(0), complete: false };
  const lines = raw.subarray(0, head).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const rest = raw.subarray(head + 4);
  if (/\bchunked\b/i.test(headers['transfer-encoding'] ?? '')) {
    const { body, complete } = dechunk(rest);
    return { raw, status, headers, body, complete };
  }
  if (headers['content-length'] !== undefined) {
    const length = Number(headers['content-length']);
    return { raw, status, headers, body: rest.subarray(0, length), complete: rest.length >= length };
  }
  // Neither: the body runs to the close, which cannot tell a whole body from a cut one.
  return { raw, status, headers, body: rest, complete: false };
}

/** De-chunks `data`; `complete` only when the terminating chunk and its CRLF arrived. */
function dechunk(data: Buffer): { body: Buffer; complete: boolean } {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = data.indexOf('\r\n', at);
    if (eol === -1) break;
    const sizeText = data.subarray(at, eol).toString('latin1').split(';')[0]!.trim();
    if (!/^[0-9a-fA-F]+$/.test(sizeText)) break;
    const size = parseInt(sizeText, 16);
    if (size === 0) {
      // No trailers are sent by the server: the last-chunk line is followed by one empty line.
      return { body: Buffer.concat(parts), complete: data.subarray(eol + 2, eol + 4).toString('latin1') === '\r\n' };
    }
    const start = eol + 2;
    parts.push(data.subarray(start, Math.min(start + size, data.length)));
    if (data.length < start + size + 2) break;
    at = start + size + 2;
  }
  return { body: Buffer.concat(parts), complete: false };
}

function requestBytes(url: URL, headers: RequestHeaders): string {
  const lines = [`GET ${url.pathname}${url.search} HTTP/1.1`, `Host: ${url.host}`, 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return lines.join('\r\n') + '\r\n\r\n';
}

/** A connected socket that has sent the GET. Read errors (resets) end the exchange like a close. */
function open(url: string, headers: RequestHeaders, paused = false, readableHighWaterMark?: number): net.Socket {
  const u = new URL(url);
  const socket = net.connect({
    port: Number(u.port || 80),
    host: u.hostname,
    ...(readableHighWaterMark ? { readableHighWaterMark } : {}),
  });
  if (paused) socket.pause();
  socket.on('error', () => {});
  socket.write(requestBytes(u, headers));
  return socket;
}

export interface RawGetOptions {
  /** Called with the count of bytes received so far after each piece (to inject a fault mid-body). */
  onProgress?: (received: number) => void;
  /** Destroys the socket when the server has not closed it by then, ms (default 30 s). */
  deadlineMs?: number;
}

export interface RawGetResult extends RawResponse {
  /** The deadline passed before the server closed the connection. */
  timedOut: boolean;
}

/** A GET that reads everything until the server closes the connection. */
export function rawGet(url: string, headers: RequestHeaders, opts: RawGetOptions = {}): Promise<RawGetResult> {
  return new Promise((resolve) => {
    const socket = open(url, headers);
    const chunks: Buffer[] = [];
    let received = 0;
    let timedOut = false;
    const deadline = setTimeout(() => {
      timedOut = true;
      socket.destroy();
    }, opts.deadlineMs ?? 30_000);
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      received += d.length;
      opts.onProgress?.(received);
    });
    socket.on('close', () => {
      clearTimeout(deadline);
      resolve({ ...parseRaw(Buffer.concat(chunks)), timedOut });
    });
  });
}

export interface AbortResult extends RawResponse {
  /** Bytes received: `byteOffset` when this client hung up, fewer when the server closed first. */
  received: number;
  /** Whether this client hung up (false: the server closed first, e.g. a short error response). */
  aborted: boolean;
}

/**
 * A GET that destroys its socket as soon as `byteOffset` bytes of the response (status line and
 * headers count) have arrived; 0 hangs up right after sending the request.
 */
export function abortAt(url: string, headers: RequestHeaders, byteOffset: number): Promise<AbortResult> {
  return new Promise((resolve) => {
    const socket = open(url, headers);
    const chunks: Buffer[] = [];
    let received = 0;
    let aborted = false;
    const hangUp = () => {
      aborted = true;
      socket.destroy();
    };
    if (byteOffset <= 0) socket.once('connect', hangUp);
    socket.on('data', (d: Buffer) => {
      if (aborted) return;
      const keep = Math.min(d.length, byteOffset - received);
      chunks.push(d.subarray(0, keep));
      received += keep;
      if (received >= byteOffset) hangUp();
    });
    socket.on('close', () => resolve({ ...parseRaw(Buffer.concat(chunks)), received, aborted }));
  });
}

export interface SlowReader {
  /** Bytes read so far. */
  readonly received: number;
  /** What was read so far, parsed (status 0 until the status line and headers were read). */
  peek(): RawResponse;
  /** Changes the reading rate (Infinity: read everything as it comes). */
  setRate(bytesPerSecond: number): void;
  /** Hangs up now. */
  abort(): void;
  /** Resolves when the connection closed (by the server, or abort()). */
  done: Promise<RawResponse>;
}

export interface SlowReaderOptions {
  /**
   * Keep the rate when the timer runs late (a server in the same process busy on the event loop):
   * each tick reads for the time since the last one, up to a second's worth, from a socket buffer
   * that holds that much. Without it a tick reads a tenth of the rate, so a busy loop slows it.
   */
  keepRate?: boolean;
}

/**
 * A GET whose socket stays paused and is read `bytesPerSecond` at a time, in ticks of 100 ms, so
 * the server meets a client that accepts bytes at that rate, with full kernel buffers in between.
 */
export function slowReader(
  url: string,
  headers: RequestHeaders,
  bytesPerSecond: number,
  opts: SlowReaderOptions = {},
): SlowReader {
  const keepRate = opts.keepRate === true && Number.isFinite(bytesPerSecond);
  const socket = open(url, headers, true, keepRate ? Math.max(64 * 1024, Math.ceil(bytesPerSecond)) : undefined);
  const chunks: Buffer[] = [];
  let received = 0;
  const keep = (piece: Buffer) => {
    chunks.push(piece);
    received += piece.length;
  };
  /** Takes up to `n` bytes of what Node has buffered, then lets it ask the kernel for more. */
  const take = (n: number) => {
    while (n > 0 && socket.readableLength > 0) {
      const piece = socket.read(Math.min(n, socket.readableLength)) as Buffer | null;
      if (piece === null) break;
      keep(piece);
      n -= piece.length;
    }
    socket.read(0);
  };
  let rate = bytesPerSecond;
  let timer: NodeJS.Timeout | null = null;
  const setRate = (bytesPerSecond: number) => {
    rate = bytesPerSecond;
    if (timer !== null) clearInterval(timer);
    timer = null;
    if (rate === Infinity) {
      socket.on('data', keep);
      socket.resume();
    } else {
      let last = performance.now();
      timer = setInterval(() => {
        const now = performance.now();
        const ms = keepRate ? Math.min(now - last, 1000) : 100;
        last = now;
        take(Math.max(1, Math.round((rate * ms) / 1000)));
      }, 100);
    }
  };
  setRate(bytesPerSecond);
  const done = new Promise<RawResponse>((resolve) => {
    socket.once('close', () => {
      if (timer !== null) clearInterval(timer);
      // Bytes that arrived before the close but were not read yet still count.
      for (let piece = socket.read() as Buffer | null; piece !== null; piece = socket.read() as Buffer | null)
        keep(piece);
      resolve(parseRaw(Buffer.concat(chunks)));
    });
  });
  return {
    get received() {
      return received;
    },
    peek: () => parseRaw(Buffer.concat(chunks)),
    setRate,
    abort: () => socket.destroy(),
    done,
  };
}
