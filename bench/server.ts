/**
 * The server the benchmarks drive: `kb-export serve` itself (same config, pools, app and shutdown),
 * and beside it, in the same process, a listener on BENCH_PORT for two references the benchmarks
 * compare against:
 * - `GET /bench/ceiling/<path of an export>` runs that export once through the server (with the
 *   request's Authorization header), keeps the body, and from then on sends the kept bytes: the
 *   ceiling of any server that sends those bytes (scenario 4);
 * - `GET /bench/relay/<bookId>?html=false`: COPY of the exported columns, its bytes passed on as
 *   they arrive, nothing parsed or encoded: the floor of any server that relays PostgreSQL's rows
 *   (bench/plans.ts). A connection of its own per request (bench/lib/http-client.ts copyQuery).
 */
import { createServer } from 'node:http';
import type { Readable } from 'node:stream';
import postgres from 'postgres';
import { loadConfig } from '../src/config.js';
import { serve } from '../src/server.js';
import { plainDocumentQuery } from './lib/plain-query.js';

const config = loadConfig(process.env);
await serve(config, { migrate: true });

const exportBase = `http://${config.host}:${config.port}`;
const kept = new Map<string, { status: number; type: string; body: Buffer }>();

createServer((req, res) => {
  const url = req.url ?? '';
  if (url.startsWith('/bench/ceiling/')) {
    const target = url.slice('/bench/ceiling'.length);
    void (async () => {
      let hit = kept.get(target);
      if (hit === undefined) {
        const r = await fetch(`${exportBase}${target}`, {
          headers: { authorization: req.headers.authorization ?? '' },
        });
        hit = { status: r.status, type: r.headers.get('content-type') ?? '', body: Buffer.from(await r.arrayBuffer()) };
        kept.set(target, hit);
      }
      res.writeHead(hit.status, { 'content-type': hit.type, 'cache-control': 'no-store' }).end(hit.body);
    })().catch(() => res.destroy());
    return;
  }
  const relay = /^\/bench\/relay\/([^/?]+)(\?.*)?$/.exec(url);
  if (relay) {
    const bookId = decodeURIComponent(relay[1]!);
    const html = new URLSearchParams(relay[2] ?? '').get('html') !== 'false';
    const sql = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    void (async () => {
      const stream = (await sql.unsafe(`COPY (${plainDocumentQuery(bookId, html)}) TO STDOUT`).readable()) as Readable;
      stream.once('close', () => void sql.end({ timeout: 1 }));
      res.writeHead(200, { 'content-type': 'text/plain' });
      stream.pipe(res);
    })().catch(() => res.destroy());
    return;
  }
  res.writeHead(404).end();
}).listen(Number(process.env.BENCH_PORT), '127.0.0.1');
