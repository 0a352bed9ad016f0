/**
 * Every error the server answers with is the flat envelope of export-api.md section 7, Fastify's own
 * included (bad URL, unknown route, wrong method, bad query; decisions.md D4.1, D7.3). Causes of
 * 500s are logged, never returned.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DependencyError } from '../db/dependency.js';
import { RETRY_AFTER_S } from '../export/admission.js';
import { ApiError, envelope, type ErrorCode } from '../errors.js';
import type { OutageLog } from './outage-log.js';

/** Paths served, with the methods they allow: anything else on them is 405 (decisions.md D7.3). */
export const ROUTES: ReadonlyArray<{ pattern: RegExp; allow: string }> = [
  { pattern: /^\/api\/v1\/open\/books\/[^/]+\/docs$/, allow: 'GET, HEAD' },
];

function send(reply: FastifyReply, code: ErrorCode, message?: string, retryAfterS?: number): FastifyReply {
  const body = envelope(code, message);
  // decisions.md D8.1, D8.2, D8.5: a refused client is told when to come back.
  if (retryAfterS !== undefined) reply.header('retry-after', String(retryAfterS));
  // RFC 6750 section 3: a 401 names the scheme the client should use.
  if (code === 'INVALID_API_KEY') reply.header('www-authenticate', 'Bearer');
  return reply.code(new ApiError(code).statusCode).type('application/json; charset=utf-8').send(body);
}

/** 405 with Allow on a served path, 404 NOT_FOUND elsewhere (decisions.md D7.3). */
function notFound(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  const path = req.url.split('?', 1)[0] ?? '';
  const route = ROUTES.find((r) => r.pattern.test(path));
  if (route) {
    reply.header('allow', route.allow);
    return send(reply, 'METHOD_NOT_ALLOWED');
  }
  return send(reply, 'NOT_FOUND');
}

export interface ErrorHandlingDeps {
  /** Where outages of dependencies are logged, once each (decisions.md D8.5). */
  outages: OutageLog;
  /** Recognises an error as a dependency's outage that only the app can tell (the rate-limit store's). */
  dependencyError?: (err: Error, req: FastifyRequest) => DependencyError | undefined;
}

/** Installs the error and not-found handlers on `app`. */
export function installErrorHandling(app: FastifyInstance, deps: ErrorHandlingDeps): void {
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    if (err instanceof ApiError) return send(reply, err.code, err.message, err.retryAfterS);
    const outage = err instanceof DependencyError ? err : deps.dependencyError?.(err, req);
    if (outage !== undefined) {
      deps.outages.failed(outage.dependency, outage);
      req.log.debug({ err }, 'dependency unavailable');
      return send(reply, 'SERVICE_UNAVAILABLE', undefined, RETRY_AFTER_S);
    }
    // No route matched: Fastify still parses the body first, so a bad or oversized body on an
    // unknown route or method must not turn the 404/405 into a 400 (decisions.md D7.3).
    if (req.is404) return notFound(req, reply);
    if (err.code === 'RATE_LIMITED' || err.statusCode === 429) return send(reply, 'RATE_LIMITED');
    const status = err.statusCode ?? 500;
    if (status === 404) return send(reply, 'NOT_FOUND');
    if (status === 405) return send(reply, 'METHOD_NOT_ALLOWED');
    if (status >= 400 && status < 500) {
      req.log.info({ err }, 'bad request');
      return send(reply, 'INVALID_PARAMETER', 'Invalid request');
    }
    req.log.error({ err }, 'request failed');
    return send(reply, 'EXPORT_FAILED');
  });

  app.setNotFoundHandler((req: FastifyRequest, reply) => notFound(req, reply));
}

/** Fastify's errors raised before routing (a malformed URL): 400 INVALID_PARAMETER in the envelope. */
export function frameworkErrors(
  err: Error,
  req: FastifyRequest,
  reply: FastifyReply,
): void {
  req.log.info({ err }, 'bad request before routing');
  void send(reply, 'INVALID_PARAMETER', 'Malformed request URL');
}
