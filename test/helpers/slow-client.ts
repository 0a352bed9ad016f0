/**
 * Real sockets for the response writer's tests: an HTTP server that hands each request to the test,
 * a raw client that pauses its socket and reads N bytes every interval (so the kernel's socket
 * buffers fill as they would for a slow reader), and a decoder that tells a complete chunked body
 * from an aborted one.
 */
import { once } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';

export const KB = 1024;
export const MB = 1024 * KB;
export const CHUNK = 64 * KB;

/** `total` bytes in `chunk`-sized pieces, as an export's encoder would hand them over. */
export async function* bytes(total: number, chunk = CHUNK): AsyncGenerator<Buffer> {
  const piece = Buffer.alloc(chunk, 'x');
  for (let sent = 0; sent < total; sent += chunk) yield sent + chunk <= total ? piece : piece.subarray(0, total - sent);
}

export interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  started: number;
}

/** A real HTTP server; each request is queued for the test, which answers it. */
export async function serve(t: { teardown(fn: () => unknown): void }) {
  const waiting: ((x: Exchange) => void)[] = [];
  const arrived: Exchange[] = [];
  const server = http.createServer((req, res) => {
    const x = { req, res, started: Date.now() };
    const take = waiting.shift();
    if (take) take(x);
    else arrived.push(x);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    port: (server.address() as AddressInfo).port,
    next: () =>
      new Promise<Exchange>((resolve) => (arrived.length > 0 ? resolve(arrived.shift()!) : waiting.push(resolve))),
  };
}

/** A raw client: sends a GET, pauses its socket, keeps what it reads. */
export class Client {
  readonly chunks: Buffer[] = [];
  received = 0;
  readonly closed: Promise<void>;
  private timer: NodeJS.Timeout | null = null;

  constructor(readonly socket: net.Socket) {
    socket.on('error', () => {}); // a dropped connection may reset; what was received is what counts
    // Not events.once: it rejects on the 'error' a reset connection emits before its 'close'.
    this.closed = new Promise<void>((resolve) => socket.once('close', () => resolve())).then(() => this.stop());
  }

  static async get(port: number, halfClose = false): Promise<Client> {
    const socket = net.connect(port, '127.0.0.1');
    socket.pause();
    await once(socket, 'connect');
    socket.write('GET /export HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n');
    if (halfClose) socket.end();
    return new Client(socket);
  }

  /** Takes up to `n` bytes from what the socket has buffered (asking the kernel for more). */
  take(n: number): void {
    while (n > 0) {
      const piece = this.socket.read(Math.min(n, this.socket.readableLength || n)) as Buffer | null;
      if (piece === null) return;
      this.chunks.push(piece);
      this.received += piece.length;
      n -= piece.length;
    }
  }

  /** Reads `n` bytes every `ms`, until stop(). */
  readEvery(n: number, ms: number): void {
    this.stop();
    this.take(n);
    this.timer = setInterval(() => this.take(n), ms);
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Reads everything until the server closes the connection. */
  async readRest(): Promise<Response> {
    this.stop();
    this.socket.on('data', (piece: Buffer) => {
      this.chunks.push(piece);
      this.received += piece.length;
    });
    this.socket.resume();
    await this.closed;
    return decode(Buffer.concat(this.chunks));
  }
}

export interface Response {
  status: number;
  body: number;
  /** Whether the chunked body ended with its terminating chunk. */
  complete: boolean;
}

/** Decodes a raw HTTP/1.1 response with a chunked body; a body cut anywhere is not complete. */
export function decode(raw: Buffer): Response {
  const head = raw.indexOf('\r\n\r\n');
  if (head === -1) return { status: 0, body: 0, complete: false };
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(raw.subarray(0, head).toString('latin1'))?.[1] ?? 0);
  let at = head + 4;
  let body = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol === -1) return { status, body, complete: false };
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (size === 0) return { status, body, complete: raw.length >= eol + 4 };
    if (raw.length < eol + 2 + size + 2)
      return { status, body: body + Math.max(0, raw.length - eol - 2), complete: false };
    body += size;
    at = eol + 2 + size + 2;
  }
}
