/** Every error in the flat envelope of export-api.md 7, Fastify's own included; 500s' causes are logged, never sent. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, envelope, type ErrorCode, DependencyError, RETRY_AFTER_S } from '../errors.js';
import type { OutageLog } from '../db/outage-log.js';
import { ROUTES } from './routes.js';

function send(reply: FastifyReply, code: ErrorCode, message?: string, retryAfterS?: number): FastifyReply {
  const body = envelope(code, message);
  // A refused client is told when to come back (D8.1, D8.2, D8.5).
  if (retryAfterS !== undefined) reply.header('retry-after', String(retryAfterS));
  // RFC 6750 section 3: a 401 names the scheme the client should use.
  if (code === 'INVALID_API_KEY') reply.header('www-authenticate', 'Bearer');
  return reply.code(new ApiError(code).statusCode).type('application/json; charset=utf-8').send(body);
}

function servedPath(req: FastifyRequest): { allow: string } | undefined {
  const path = req.url.split('?', 1)[0] ?? '';
  return ROUTES.find((r) => r.pattern.test(path));
}

function methodMiss(req: FastifyRequest): boolean {
  const route = servedPath(req);
  return route !== undefined && !route.allow.split(', ').includes(req.method);
}

/** 405 with Allow on a served path, 404 elsewhere (D7.3): the not-found handler and each path's 405 route. */
export function notServed(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const route = servedPath(req);
  if (route) {
    reply.header('allow', route.allow);
    return send(reply, 'METHOD_NOT_ALLOWED');
  }
  return send(reply, 'NOT_FOUND');
}

interface ErrorHandlingDeps {
  outages: OutageLog;
  /** Recognises an error as a dependency's outage that only the app can tell (the rate-limit store's). */
  dependencyError?: (err: Error, req: FastifyRequest) => DependencyError | undefined;
}

export function installErrorHandling(app: FastifyInstance, deps: ErrorHandlingDeps): void {
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    if (err instanceof ApiError) return send(reply, err.code, err.message, err.retryAfterS);
    const outage = err instanceof DependencyError ? err : deps.dependencyError?.(err, req);
    if (outage !== undefined) {
      deps.outages.failed(outage.dependency, outage);
      req.log.debug({ err }, 'dependency unavailable');
      return send(reply, 'SERVICE_UNAVAILABLE', undefined, RETRY_AFTER_S);
    }
    // No route answers this: a malformed Content-Type must not turn the 404/405 into a 400 (D7.3).
    if (req.is404 || methodMiss(req)) return notServed(req, reply);
    if (err.code === 'RATE_LIMITED' || err.statusCode === 429) return send(reply, 'RATE_LIMITED');
    const status = err.statusCode ?? 500;
    if (status === 404) return send(reply, 'NOT_FOUND');
    if (status === 405) return send(reply, 'METHOD_NOT_ALLOWED');
    if (status === 413) return send(reply, 'PAYLOAD_TOO_LARGE');
    if (status >= 400 && status < 500) {
      req.log.info({ err }, 'bad request');
      return send(reply, 'BAD_REQUEST');
    }
    req.log.error({ err }, 'request failed');
    return send(reply, 'EXPORT_FAILED');
  });

  app.setNotFoundHandler((req: FastifyRequest, reply) => notServed(req, reply));
}

/** Fastify's errors before routing (a malformed URL): 400, connection closed, since no hook runs (D7.4). */
export function frameworkErrors(err: Error, req: FastifyRequest, reply: FastifyReply): void {
  req.log.info({ err }, 'bad request before routing');
  // Before routing no onRequest hook runs: the request id (D10.5) is set here.
  reply.header('connection', 'close').header('x-request-id', req.id);
  void send(reply, 'BAD_REQUEST', 'Malformed request URL');
}
