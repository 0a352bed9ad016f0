/** The export route, GET and HEAD (export-api.md 4.1): key, parameters, book, 304, in D5.5's order; then the Exporter. */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { exportHeaders } from '../encode/body-format.js';
import type { Exporter, ExportTarget } from '../exporter.js';
import { EXPORT_PATH } from '../../http/routes.js';
import { refuseBody } from '../../http/pre-routing.js';
import { watchClient } from './client-gone.js';
import { ifNoneMatchHits } from './conditional.js';
import type { Lookups } from './lookups.js';
import { bodyFormatOf, contentEncodingOf } from './negotiate.js';
import { booleanParam, tokenParam } from './params.js';

type ExportRoute = { Params: { bookSlug: string }; Querystring: Record<string, unknown> };

export function registerExportRoute(api: FastifyInstance, exporter: Exporter, lookups: Lookups): void {
  async function targetOf(req: FastifyRequest<ExportRoute>): Promise<ExportTarget> {
    const { userId, keyId } = await lookups.caller(req.headers.authorization);
    const excludeCategories = booleanParam(req.query, 'excludeCategories', true);
    const includeContentHtml = booleanParam(req.query, 'includeContentHtml', true);
    const changedSince = tokenParam(req.query, 'changedSince');
    // decisions.md D11.3: the version behind the ETag and a 304 is read where the body will be.
    const { source, book } = await exporter.locate(changedSince, (sql) => lookups.book(userId, req.params.bookSlug, sql), req.log);
    const format = bodyFormatOf(req.headers);
    const encoding = contentEncodingOf(req.headers);
    return { userId, keyId, bookSlug: req.params.bookSlug, bookId: book.id, version: book.export_version, tokenFloor: book.token_floor, excludeCategories, includeContentHtml, format, encoding, changedSince, source };
  }

  /** decisions.md D9.2: 304 before any slot or snapshot is taken. */
  function notModified(req: FastifyRequest, reply: FastifyReply, target: ExportTarget): boolean {
    const etag = exporter.etag(target);
    if (!ifNoneMatchHits(req.headers['if-none-match'], etag)) return false;
    const { 'cache-control': cacheControl, vary } = exportHeaders(target.format);
    void reply.code(304).headers({ etag, 'cache-control': cacheControl, vary }).send();
    return true;
  }

  api.get<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const client = watchClient(req.raw, reply.raw);
    try {
      const target = await targetOf(req);
      if (notModified(req, reply, target)) return;
      await exporter.send(target, reply.raw, { log: req.log, signal: client.signal, takeOver: () => takeOver(reply) });
    } finally {
      client.dispose();
    }
  });

  // HEAD answers what GET would (status and headers) without running the export.
  api.head<ExportRoute>(EXPORT_PATH, { preParsing: refuseBody }, async (req, reply) => {
    const target = await targetOf(req);
    if (notModified(req, reply, target)) return reply;
    const { etag, token } = await exporter.head(
      target,
      (sql) => lookups.changeState(target.bookId, sql),
      (sql) => lookups.book(target.userId, target.bookSlug, sql),
      req.log,
    );
    return reply
      .code(200)
      .headers({ ...exportHeaders(target.format, target.encoding), etag, 'export-change-token': token })
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
