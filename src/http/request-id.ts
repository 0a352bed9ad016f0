/**
 * Request ids (decisions.md D10.5): a client's own `X-Request-Id` when it is well-formed (1-128
 * characters of letters, digits and `._:@/+=-`, enough for UUIDs, ULIDs and trace ids), a new
 * random UUID otherwise. Fastify puts it on every log line of the request (`reqId`); the server
 * echoes it on every response.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

const WELL_FORMED = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/** Fastify's genReqId: the request's id. */
export function requestIdOf(req: IncomingMessage): string {
  const sent = req.headers['x-request-id'];
  return typeof sent === 'string' && WELL_FORMED.test(sent) ? sent : randomUUID();
}
