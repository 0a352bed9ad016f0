/**
 * The demo's media, served by `serve --demo` only (a plain serve never loads src/generate/), so
 * that a backup with `--media-dir` of the demo works on a fresh clone: every path below a
 * root-relative MEDIA_PROXY_PREFIX answers with bytes made from the path alone, the same on every
 * machine and start. Images (`.png`, `.jpg`, `.jpeg`, `.gif`, `.webp`: what the generator's
 * documents reference) get a 16×16 PNG of two colours drawn from the path's SHA-256, stored
 * without compression so that no zlib version changes its bytes; anything else (the generator's
 * videos and attachments) a line of text naming it. No file is read, whatever the path.
 */
import { createHash } from 'node:crypto';
import zlib from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

const SIZE = 16;
const IMAGE = /\.(?:png|jpe?g|gif|webp)$/i;
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(Buffer.concat([head.subarray(4), data])) >>> 0, 0);
  return Buffer.concat([head, data, crc]);
}

function adler32(data: Buffer): number {
  let a = 1;
  let b = 0;
  for (const byte of data) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  return ((b << 16) | a) >>> 0;
}

/** A zlib stream of one stored (uncompressed) block: the same bytes whatever the zlib. */
function storedZlib(data: Buffer): Buffer {
  const head = Buffer.from([
    0x78,
    0x01,
    0x01,
    data.length & 0xff,
    data.length >> 8,
    ~data.length & 0xff,
    (~data.length >> 8) & 0xff,
  ]);
  const tail = Buffer.alloc(4);
  tail.writeUInt32BE(adler32(data), 0);
  return Buffer.concat([head, data, tail]);
}

/** A 16×16 RGB PNG checkered in two colours taken from SHA-256 of `name`: about 850 bytes, the same for the same name. */
export function demoPng(name: string): Buffer {
  const digest = createHash('sha256').update(name).digest();
  const rows = Buffer.alloc(SIZE * (1 + 3 * SIZE));
  for (let y = 0; y < SIZE; y++) {
    const row = y * (1 + 3 * SIZE);
    rows[row] = 0; // filter: none
    for (let x = 0; x < SIZE; x++) {
      const colour = ((x >> 2) + (y >> 2)) % 2 === 0 ? 0 : 3;
      digest.copy(rows, row + 1 + 3 * x, colour, colour + 3);
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(SIZE, 0);
  ihdr.writeUInt32BE(SIZE, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type: RGB
  return Buffer.concat([
    PNG_SIGNATURE,
    chunk('IHDR', ihdr),
    chunk('IDAT', storedZlib(rows)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

/**
 * Serves the demo's media below `prefix` (GET and HEAD): a PNG for an image's path, a line of text
 * otherwise, 404 for the prefix itself or a folder. Returns false, registering nothing, when the
 * prefix is not root-relative (another host serves those URLs).
 */
export function registerDemoMedia(app: FastifyInstance, prefix: string): boolean {
  if (!prefix.startsWith('/') || prefix.startsWith('//')) return false;
  app.route({
    method: ['GET', 'HEAD'],
    url: `${prefix}*`,
    handler: async (req: FastifyRequest, reply: FastifyReply) => {
      const pathname = (req.raw.url ?? '').split(/[?#]/, 1)[0]!;
      const name = pathname.slice(prefix.length);
      if (name === '' || name.endsWith('/'))
        return reply.code(404).send({ success: false, code: 'NOT_FOUND', message: 'No such media' });
      reply.header('cache-control', 'public, max-age=86400');
      if (IMAGE.test(name)) return reply.type('image/png').send(demoPng(name));
      let decoded = name;
      try {
        decoded = decodeURIComponent(name);
      } catch {
        // Shown as written.
      }
      return reply.type('text/plain; charset=utf-8').send(`kb-export demo media: ${decoded}\n`);
    },
  });
  return true;
}
