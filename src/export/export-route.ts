/**
 * The export route, GET and HEAD (export-api.md 4.1): the HTTP of it, in D5.5's order (key,
 * parameters, knowledge base, then a 304), the rest handed to the Exporter.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { refuseBody } from '../http/pre-routing.js';
import { EXPORT_PATH } from '../http/routes.js';
import { exportHeaders } from './encode/body-format.js';
import type { Exporter } from './exporter.js';
import type { Located } from './read-sources.js';
import { watchClient } from './request/client-gone.js';
import { ifNoneMatchHits } from './request/conditional.js';
import { exportRequestOf, type ExportRequest } from './request/export-request.js';

type ExportRoute = { Params: { bookSlug: string }; Querystring: Record<string, unknown> };

export function registerExportRoute(api: FastifyInstance, exporter: Exporter): void {
  /** The request and where it reads; throws 401, 400, 404 or 503 in that order. */
  async function read(req: FastifyRequest<ExportRoute>): Promise<{ request: ExportRequest; located: Located }> {
    const caller = await exporter.caller(req.headers.authorization);
    const request = exportRequestOf(caller, req.params.bookSlug, req.query, req.headers);
    return { request, located: await exporter.locate(request, req.log) };
  }

  /** 304 before any slot or snapshot is taken (D9.2). */
  function notModified(req: FastifyRequest, reply: FastifyReply, request: ExportRequest, { book }: Located): boolean {
    const etag = exporter.etag(request, book.id, book.export_version);
    if (!ifNoneMatchHits(req.headers['if-none-match'], etag)) return false;
    const { 'cache-control': cacheControl, vary } = exportHeaders(request.format);
    void reply.code(304).headers({ etag, 'cache-control': cacheControl, vary }).send();
    return true;
  }

  api.get<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const client = watchClient(req.raw, reply.raw);
    try {
      const { request, located } = await read(req);
      if (notModified(req, reply, request, located)) return;
      await exporter.send(request, located, reply.raw, {
        log: req.log,
        signal: client.signal,
        takeOver: () => takeOver(reply),
      });
    } finally {
      client.dispose();
    }
  });

  // HEAD answers what GET would (status and headers) without running the export.
  api.head<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const { request, located } = await read(req);
    if (notModified(req, reply, request, located)) return reply;
    const own = await exporter.head(request, located, req.log);
    return reply
      .code(200)
      .headers({ ...exportHeaders(request.format, request.encoding), ...own })
      .send();
  });
}

/** The exporter writes the raw response from here on, with the headers set on the reply (rate limit, request id). */
function takeOver(reply: FastifyReply): void {
  if (reply.sent) return;
  reply.hijack();
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) reply.raw.setHeader(name, value as string);
  }
}
