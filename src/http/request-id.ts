/** Request ids (D10.5): the client's well-formed X-Request-Id, else a random UUID; logged as `reqId`, echoed. */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

const WELL_FORMED = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

export function requestIdOf(req: IncomingMessage): string {
  const sent = req.headers['x-request-id'];
  return typeof sent === 'string' && WELL_FORMED.test(sent) ? sent : randomUUID();
}
