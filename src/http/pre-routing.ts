/** Before a route answers (D7.4): timeouts, parser errors, Host, bodies (never read), methods. */
import { METHODS, type IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { clientErrorHandler } from './client-errors.js';

function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) !== 0);
}

/** Fastify options; `requestTimeoutMs` bounds receiving the request line and headers (408), never the stream. */
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

/** Installs the rules before any route: no body parser, every method routable, 400 without Host (RFC 9112 3.2). */
export function installPreRouting(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));

  // Any method can then reach its path's 405 (D5.4); CONNECT goes to 'connect' listeners, never the router.
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

  // No `100 Continue`: the answer comes at once; other expectations are ignored (RFC 9110 10.1.1), not 417.
  const answer = (req: IncomingMessage, res: unknown) => app.server.emit('request', req, res);
  app.server.on('checkContinue', answer);
  app.server.on('checkExpectation', answer);
}

/** preParsing hook: 413 when the request has a body; it runs after onRequest, so the rate limit counted (D5.4). */
export async function refuseBody(req: FastifyRequest): Promise<void> {
  if (hasBody(req.raw)) throw new ApiError('PAYLOAD_TOO_LARGE');
}

export function methodsExcept(app: FastifyInstance, allowed: readonly string[]): string[] {
  return app.supportedMethods.filter((m) => !allowed.includes(m));
}
