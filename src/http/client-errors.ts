/**
 * Errors Node's HTTP parser raises before there is a request to route (its 'clientError' event):
 * answered in the section 7 envelope on the raw socket, then the connection is closed
 * (decisions.md D7.4). HPE_HEADER_OVERFLOW is 431 HEADERS_TOO_LARGE, ERR_HTTP_REQUEST_TIMEOUT
 * (requestTimeout or headersTimeout passed) is 408 REQUEST_TIMEOUT, anything else the parser
 * refuses (request line, header, chunked framing) is 400 BAD_REQUEST.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { envelope, ERRORS, type ErrorCode } from '../errors.js';

/** The code a parser error is answered with. */
function clientErrorCode(err: { code?: string }): ErrorCode {
  if (err.code === 'HPE_HEADER_OVERFLOW') return 'HEADERS_TOO_LARGE';
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return 'REQUEST_TIMEOUT';
  return 'BAD_REQUEST';
}

/** The whole HTTP/1.1 response for `code`: envelope body, JSON content type, Connection: close. */
function rawErrorResponse(code: ErrorCode): string {
  const status = ERRORS[code].status;
  const body = JSON.stringify(envelope(code));
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
    'Connection: close\r\n' +
    // decisions.md D10.5: a request refused before it was parsed still gets an id of its own.
    `X-Request-Id: ${randomUUID()}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    '\r\n' +
    body
  );
}

/**
 * Fastify's `clientErrorHandler` (bound to the instance). Writes nothing when the socket is gone or
 * not writable, or when a response on it has already sent its headers: bytes of ours in the middle
 * of that response would corrupt it, and destroying it is what D6.3 asks of a broken response.
 */
export function clientErrorHandler(this: { log: FastifyBaseLogger }, err: Error & { code?: string }, socket: Socket): void {
  // The peer is gone: there is nobody to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const code = clientErrorCode(err);
  this.log.info({ code: err.code, remoteAddress: socket.remoteAddress }, 'request refused before routing');
  // Node's own default handler checks the same in-flight response (net.Socket has no public accessor).
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) socket.write(rawErrorResponse(code));
  socket.destroy();
}
