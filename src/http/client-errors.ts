/** Node's parser errors, before there is a request: the envelope on the raw socket, then close (D7.4). */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { envelope, ERRORS, type ErrorCode } from '../errors.js';

function clientErrorCode(err: { code?: string }): ErrorCode {
  if (err.code === 'HPE_HEADER_OVERFLOW') return 'HEADERS_TOO_LARGE';
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return 'REQUEST_TIMEOUT';
  return 'BAD_REQUEST';
}

function rawErrorResponse(code: ErrorCode): string {
  const status = ERRORS[code].status;
  const body = JSON.stringify(envelope(code));
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
    'Connection: close\r\n' +
    // A request refused before it was parsed still gets an id of its own (D10.5).
    `X-Request-Id: ${randomUUID()}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    '\r\n' +
    body
  );
}

/**
 * How long a refused connection is read after its answer: a close while the client still sends
 * makes its kernel answer the next bytes with a reset, which can discard the answer before the
 * client read it (seen with 1,000 trickling clients on a loaded machine). Past this, it is cut.
 */
const LINGER_MS = 2000;

/**
 * Fastify's clientErrorHandler. Before any request of the connection is in flight: the envelope,
 * then a lingering close (FIN, the client's bytes read and dropped until it closes or LINGER_MS).
 * Beside a request in flight, the connection is cut, with the envelope only if that request's
 * response sent nothing yet (D6.3).
 */
export function clientErrorHandler(
  this: { log: FastifyBaseLogger },
  err: Error & { code?: string },
  socket: Socket,
): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // Answered already: a second error while the connection lingers.
  if (!socket.writable) return;
  const code = clientErrorCode(err);
  this.log.info({ code: err.code, remoteAddress: socket.remoteAddress }, 'request refused before routing');
  // Node's own default handler checks the same in-flight response (net.Socket has no public accessor).
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (inFlight) {
    if (!inFlight.headersSent) socket.write(rawErrorResponse(code));
    socket.destroy();
    return;
  }
  socket.end(rawErrorResponse(code));
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}
