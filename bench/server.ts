/**
 * The server the benchmarks drive: `kb-export serve` itself (same config, pools, app and shutdown),
 * plus one route that answers with the identical bytes of an export held in memory, the ceiling
 * that scenario 4 compares against in the same process.
 *
 * `GET /bench/ceiling/<path of an export>` runs that export once through the app (with the request's
 * Authorization header), keeps the body, and from then on sends the kept bytes.
 */
import { loadConfig } from '../src/config.js';
import { serve } from '../src/server.js';

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
  },
});
