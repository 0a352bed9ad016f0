/**
 * For the backup client's tests that need no PostgreSQL: an export body of the API's shape made
 * up in memory, and a stub HTTP server on 127.0.0.1 (real sockets) answering as the test says.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';

/** A JSON export body of `documents` documents of about `bytesEach` bytes of random hex text each. */
export function exportBody(documents: number, bytesEach = 1000): Buffer {
  const docs = Array.from({ length: documents }, (_, i) => ({
    id: `d${i}`,
    name: `Document ${i}`,
    contentHtml: `<p>${randomBytes(bytesEach / 2).toString('hex')}</p>`,
  }));
  return Buffer.from(
    JSON.stringify({
      success: true,
      book: { id: 'b', slug: 'kb', name: 'KB' },
      documents: docs,
      meta: { count: documents },
    }),
  );
}

export interface Stub {
  /** `http://127.0.0.1:<port>` */
  base: string;
  /** The requests received: their path and headers. */
  requests: { url: string; headers: http.IncomingHttpHeaders }[];
}

/** Starts a stub server answering every request with `handler`; closed at the test's teardown. */
export async function startStub(
  t: { teardown(fn: () => unknown): void },
  handler: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<Stub> {
  const requests: Stub['requests'] = [];
  const server = http.createServer((req, res) => {
    requests.push({ url: req.url ?? '', headers: req.headers });
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { base: `http://127.0.0.1:${(server.address() as { port: number }).port}`, requests };
}
