/**
 * What happens to a request before a route answers it (decisions.md D7.4): the server's receive
 * timeouts, Node's parser errors (client-errors.ts), a missing Host, request bodies, and the
 * methods that reach the router. The open API takes no body: none is ever read or buffered, and
 * a connection whose request carries one is closed after the answer, so a client still sending
 * is cut at once.
 */
import { METHODS, type IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { clientErrorHandler } from './client-errors.js';

/** True when the request announces a body (a non-zero Content-Length, or any Transfer-Encoding). */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) !== 0);
}

/**
 * Fastify options to spread into its constructor: `requestTimeoutMs` bounds receiving the request
 * line and headers (408 REQUEST_TIMEOUT), never the response's stream: Node stops timing a
 * request once it was received in full.
 */
export function preRoutingOptions(requestTimeoutMs: number) {
  return {
    // Fastify sets server.requestTimeout from its own option once Node built the server from `http`.
    requestTimeout: requestTimeoutMs,
    // No parser reads a body (installPreRouting); should one ever be added, it gets Fastify's smallest limit.
    bodyLimit: 1,
    clientErrorHandler,
    http: {
      requestTimeout: requestTimeoutMs,
      headersTimeout: requestTimeoutMs,
      // Node looks for expired requests on this interval (30 s by default, far past the timeout).
      connectionsCheckingInterval: Math.min(1000, Math.ceil(requestTimeoutMs / 4)),
      // Node answers a missing Host itself, with an empty 400; installPreRouting answers the envelope.
      requireHostHeader: false,
    },
  };
}

/**
 * Installs the rules on `app`, before any route is registered: no body parser, every method Node
 * parses routable, `Connection: close` for requests with a body, 400 BAD_REQUEST for an HTTP/1.1
 * request without Host (RFC 9112 section 3.2), and no `100 Continue`.
 */
export function installPreRouting(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));

  // A route can then count (and 405) any method on its path (decisions.md D5.4). CONNECT never
  // reaches the router: Node hands it to 'connect' listeners, and without one destroys the socket.
  for (const method of METHODS) {
    if (method !== 'CONNECT' && !app.supportedMethods.includes(method)) app.addHttpMethod(method);
  }

  app.addHook('onRequest', async (req, reply) => {
    // Otherwise Node reads the unread rest of the body after the answer, to reach the next request.
    if (hasBody(req.raw)) reply.header('connection', 'close');
    if (req.raw.httpVersion === '1.1' && req.headers.host === undefined) {
      reply.header('connection', 'close');
      throw new ApiError('BAD_REQUEST', 'Missing Host header');
    }
  });

  // A client that asks before sending its body is never invited to send it: it gets its answer
  // (405, 413, ...) at once. An expectation other than 100-continue is ignored (RFC 9110 10.1.1
  // allows it) rather than answered with Node's empty 417.
  const answer = (req: IncomingMessage, res: unknown) => app.server.emit('request', req, res);
  app.server.on('checkContinue', answer);
  app.server.on('checkExpectation', answer);
}

/**
 * preParsing hook of a route that takes no body: 413 PAYLOAD_TOO_LARGE when the request has one.
 * A preParsing hook runs after every onRequest hook, so the rate limit has counted the request
 * (decisions.md D5.4) before this answer.
 */
export async function refuseBody(req: FastifyRequest): Promise<void> {
  if (hasBody(req.raw)) throw new ApiError('PAYLOAD_TOO_LARGE');
}

/** Every method `app` routes but `allowed`: what a path's 405 route registers. */
export function methodsExcept(app: FastifyInstance, allowed: readonly string[]): string[] {
  return app.supportedMethods.filter((m) => !allowed.includes(m));
}
