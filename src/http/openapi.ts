/** `GET /openapi.json` (D10.4), by hand from the error table and routes; test/http/openapi.test.ts checks it. */
import type { FastifyInstance } from 'fastify';
import { ERRORS, type ErrorCode } from '../errors.js';
import { EXPORT_PATH, MAX_CHANGED_SINCE_CHARS } from './routes.js';

/** Which error codes each status of the export path can carry (README's error table). */
function codesByStatus(): Map<number, ErrorCode[]> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const [code, { status }] of Object.entries(ERRORS) as [ErrorCode, { status: number }][]) {
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return byStatus;
}

const RETRY_AFTER = {
  description: 'Seconds to wait before retrying (D8.1, D8.2, D8.5)',
  schema: { type: 'integer', minimum: 0 },
};
const REQUEST_ID = {
  description: "The request id: the client's own when well-formed, else a new UUID (D10.5)",
  schema: { type: 'string' },
};

function errorResponses(): Record<string, object> {
  const out: Record<string, object> = {};
  for (const [status, codes] of codesByStatus()) {
    out[String(status)] = {
      description: codes.map((c) => `${c}: ${ERRORS[c].message}`).join('; '),
      headers: {
        'X-Request-Id': REQUEST_ID,
        ...(status === 429 || status === 503 ? { 'Retry-After': RETRY_AFTER } : {}),
      },
      content: {
        'application/json': {
          schema: {
            allOf: [{ $ref: '#/components/schemas/ErrorEnvelope' }, { properties: { code: { enum: codes } } }],
          },
        },
      },
    };
  }
  return out;
}

const booleanParam = (name: string, description: string) => ({
  name,
  in: 'query',
  required: false,
  description: `${description}; \`true\`, \`false\`, \`1\` or \`0\`, anything else is 400 INVALID_PARAMETER`,
  schema: { type: 'string', enum: ['true', 'false', '1', '0'], default: 'true' },
});

const plainJson = (schema: object, description: string) => ({
  description,
  headers: { 'X-Request-Id': REQUEST_ID },
  content: { 'application/json': { schema } },
});

function getAndHead(get: { summary: string; responses: Record<string, { description: string; content?: unknown }> }) {
  const headResponses = Object.fromEntries(
    Object.entries(get.responses).map(([status, { content: _content, ...rest }]) => [status, rest]),
  );
  return { get, head: { summary: `${get.summary}: headers only`, responses: headResponses } };
}

function openApiDocument(): Record<string, unknown> {
  const exportPath = EXPORT_PATH.replace(':bookSlug', '{bookSlug}');
  const exportOperation = (summary: string, body: boolean) => ({
    summary,
    security: [{ bearerAuth: [] }],
    parameters: [
      { name: 'bookSlug', in: 'path', required: true, schema: { type: 'string' } },
      booleanParam('excludeCategories', '`true` omits folder nodes (type `category`)'),
      booleanParam('includeContentHtml', '`false` returns `contentHtml: null`'),
      {
        name: 'changedSince',
        in: 'query',
        required: false,
        description:
          'The Export-Change-Token of an earlier export with the same options: only the documents that changed or entered since, and the ids that left (D12.2); 400 for a token of other options or another book, 410 once expired or after a failover (D12.8)',
        schema: { type: 'string', minLength: 1, maxLength: MAX_CHANGED_SINCE_CHARS, pattern: '^[A-Za-z0-9_-]+$' },
      },
      {
        name: 'afterOrderKey',
        in: 'query',
        required: false,
        description:
          'With afterId: only the documents after this position in the export order, from a new snapshot, to resume a cut export (D13.1); one without the other, or either with changedSince, is 400',
        schema: { type: 'string', maxLength: 1024 },
      },
      {
        name: 'afterId',
        in: 'query',
        required: false,
        description: 'The document id of the position, with afterOrderKey (D13.1)',
        schema: { type: 'string', maxLength: 1024 },
      },
      {
        name: 'If-None-Match',
        in: 'header',
        required: false,
        description: 'ETags (or `*`) the client holds: 304 when one matches (D9.2)',
        schema: { type: 'string' },
      },
      {
        name: 'Accept',
        in: 'header',
        required: false,
        description: '`application/x-ndjson` (preferred by q-value or order) selects NDJSON (D9.4)',
        schema: { type: 'string' },
      },
      {
        name: 'Accept-Encoding',
        in: 'header',
        required: false,
        description: '`zstd`, `br`, `gzip` by q-value (D9.3)',
        schema: { type: 'string' },
      },
      {
        name: 'X-Request-Id',
        in: 'header',
        required: false,
        description: 'Echoed when well-formed (D10.5)',
        schema: { type: 'string', maxLength: 128 },
      },
    ],
    responses: {
      '200': {
        description: 'The export, streamed; complete only when it ends with meta.count (a broken body ends without it)',
        headers: {
          ETag: {
            description:
              'Strong for identity bodies (equal ETags promise byte-identical bodies), weak for compressed ones (D9.1)',
            schema: { type: 'string' },
          },
          'Export-Change-Token': {
            description:
              'Names the snapshot the body was read from: keep it once meta.count was read, and send it back as changedSince (D12.1)',
            schema: { type: 'string', maxLength: MAX_CHANGED_SINCE_CHARS },
          },
          'Export-Media-Prefix': {
            description:
              "MEDIA_PROXY_PREFIX: the URLs under it in contentHtml and cover.url are this service's media (D13.3)",
            schema: { type: 'string' },
          },
          'Content-Encoding': {
            description: 'When compressed (D9.3)',
            schema: { type: 'string', enum: ['zstd', 'br', 'gzip'] },
          },
          Vary: { schema: { type: 'string' } },
          'X-Request-Id': REQUEST_ID,
        },
        ...(body
          ? {
              content: {
                'application/json': { schema: { $ref: '#/components/schemas/Export' } },
                'application/x-ndjson': {
                  schema: {
                    type: 'string',
                    description:
                      'A line {"success":true,"book":{…}}, one Document per line, a delta\'s {"removed":"ID"} lines, and {"meta":{"count":N}} last',
                  },
                },
              },
            }
          : {}),
      },
      '304': {
        description: 'Not modified: the ETag again, no body (D9.2)',
        headers: { ETag: { schema: { type: 'string' } }, 'X-Request-Id': REQUEST_ID },
      },
      ...errorResponses(),
    },
  });
  const nullableString = { type: ['string', 'null'] };
  return {
    openapi: '3.1.0',
    info: {
      title: 'kb-export',
      version: '1',
      description: 'Streaming export of knowledge bases (docs/export-api.md, docs/decisions.md).',
    },
    paths: {
      [exportPath]: {
        get: exportOperation('Export every active document of a knowledge base', true),
        head: exportOperation('The headers a GET would have, without the export', false),
      },
      '/livez': getAndHead({
        summary: 'Liveness (D10.1)',
        responses: {
          '200': plainJson({ type: 'object', properties: { status: { const: 'ok' } } }, 'The process runs'),
        },
      }),
      '/readyz': getAndHead({
        summary: 'Readiness (D10.2)',
        responses: {
          '200': plainJson(
            { type: 'object', properties: { status: { const: 'ready' } } },
            'The database (and Redis) answered in the last few seconds',
          ),
          '503': plainJson(
            { type: 'object', properties: { status: { const: 'unavailable' }, reason: { type: 'string' } } },
            'Not ready, or shutting down',
          ),
        },
      }),
      '/metrics': getAndHead({
        summary: 'Prometheus metrics (D10.3); on METRICS_PORT instead when that is set',
        responses: {
          '200': { description: 'Text exposition', content: { 'text/plain': { schema: { type: 'string' } } } },
        },
      }),
      '/openapi.json': getAndHead({
        summary: 'This document (D10.4)',
        responses: { '200': plainJson({ type: 'object' }, 'OpenAPI 3.1') },
      }),
    },
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'A user API key (`kbx_…`)' } },
      schemas: {
        ErrorEnvelope: {
          type: 'object',
          required: ['success', 'code', 'message'],
          properties: {
            success: { const: false },
            code: { type: 'string', enum: Object.keys(ERRORS) },
            message: { type: 'string' },
          },
        },
        Book: {
          type: 'object',
          properties: {
            id: { type: 'string' },
            slug: { type: 'string' },
            name: { type: 'string' },
            description: nullableString,
            coverImage: nullableString,
            createdAt: { type: 'string', format: 'date-time' },
            updatedAt: { type: 'string', format: 'date-time' },
          },
        },
        Document: {
          type: 'object',
          properties: {
            id: { type: 'string' },
            slug: { type: 'string' },
            name: { type: 'string' },
            type: { type: 'string' },
            parentId: nullableString,
            orderKey: { type: 'string' },
            description: nullableString,
            emojiInfo: nullableString,
            cover: { type: ['object', 'null'], properties: { url: { type: 'string' }, position: { type: 'string' } } },
            tags: { type: ['array', 'null'], items: { type: 'string' } },
            themeId: { type: 'string' },
            backgroundThemeId: { type: 'string' },
            bodyFontSize: { type: 'string' },
            createdAt: { type: 'string', format: 'date-time' },
            updatedAt: { type: 'string', format: 'date-time' },
            contentStr: nullableString,
            contentHtml: nullableString,
          },
        },
        Export: {
          type: 'object',
          required: ['success', 'book', 'documents', 'meta'],
          properties: {
            success: { const: true },
            book: { $ref: '#/components/schemas/Book' },
            documents: { type: 'array', items: { $ref: '#/components/schemas/Document' } },
            removed: {
              type: 'array',
              items: { type: 'string' },
              description: 'A delta only (changedSince): ids of the documents that left the export (D12.2)',
            },
            meta: { type: 'object', required: ['count'], properties: { count: { type: 'integer', minimum: 0 } } },
          },
        },
      },
    },
  };
}

/** `GET /openapi.json` on `app`: no key, outside the open API's rate limit. */
export function registerOpenApiRoute(app: FastifyInstance): void {
  const body = JSON.stringify(openApiDocument());
  app.get('/openapi.json', { exposeHeadRoute: true }, async (_req, reply) =>
    reply.type('application/json; charset=utf-8').send(body),
  );
}
