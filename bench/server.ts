/**
 * The server the benchmarks drive: `kb-export serve` itself (same config, pools, app and shutdown),
 * plus one route that answers with the identical bytes of an export held in memory, the ceiling
 * that scenario 4 compares against in the same process.
 *
 * `GET /bench/ceiling/<path of an export>` runs that export once through the app (with the request's
 * Authorization header), keeps the body, and from then on sends the kept bytes.
 */
import { loadConfig } from '../src/config.js';
import type { Readable } from 'node:stream';
import postgres from 'postgres';
import { serve } from '../src/server.js';
import { plainDocumentQuery } from './lib/http-client.js';

const cache = new Map<string, { status: number; type: string; body: Buffer }>();

await serve(loadConfig(process.env), {
  migrate: true,
  demo: false,
  beforeListen(app) {
    app.get('/bench/ceiling/*', async (req, reply) => {
      const target = req.url.slice('/bench/ceiling'.length);
      let hit = cache.get(target);
      if (hit === undefined) {
        const res = await app.inject({ method: 'GET', url: target, headers: { authorization: req.headers.authorization ?? '' } });
        hit = { status: res.statusCode, type: String(res.headers['content-type']), body: res.rawPayload };
        cache.set(target, hit);
      }
      return reply.code(hit.status).header('content-type', hit.type).header('cache-control', 'no-store').send(hit.body);
    });
    // The floor of any server that relays PostgreSQL's rows to an HTTP client (bench/plans.ts):
    // COPY of the exported columns, its bytes passed on to the response as they arrive, nothing
    // parsed or encoded. A connection of its own per request (see bench/lib/http-client.ts copyQuery).
    app.get('/bench/relay/:bookId', async (req, reply) => {
      const { bookId } = req.params as { bookId: string };
      const html = (req.query as { html?: string }).html !== 'false';
      const sql = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
      const stream = (await sql.unsafe(`COPY (${plainDocumentQuery(bookId, html)}) TO STDOUT`).readable()) as Readable;
      stream.once('close', () => void sql.end({ timeout: 1 }));
      return reply.header('content-type', 'text/plain').send(stream);
    });
  },
});
