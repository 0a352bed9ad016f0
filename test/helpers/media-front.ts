/**
 * For the backup's media tests: a front server on 127.0.0.1, as a deployment puts a media proxy
 * beside the API on one origin. Requests under `/api/` are passed to the real kb-export server
 * (streamed both ways, headers as they are); every other request goes to the test's media
 * handler. Each request is recorded (path, headers, when) so a test can count fetches and look
 * at what was sent.
 */
import http from 'node:http';

export interface FrontRequest {
  url: string;
  headers: http.IncomingHttpHeaders;
  at: number;
}

export interface Front {
  /** `http://127.0.0.1:<port>` */
  base: string;
  requests: FrontRequest[];
  /** The requests for a path (query included), in order. */
  requestsOf(url: string): FrontRequest[];
}

/** Starts a front for `api` (the real server's base URL) and `media`; closed at the test's teardown. */
export async function startFront(
  t: { teardown(fn: () => unknown): void },
  api: string | null,
  media: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<Front> {
  const requests: FrontRequest[] = [];
  const server = http.createServer((req, res) => {
    const url = req.url ?? '';
    if (api === null || !url.startsWith('/api/')) {
      requests.push({ url, headers: req.headers, at: Date.now() });
      media(req, res);
      return;
    }
    const target = new URL(api);
    const up = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: url,
        method: req.method,
        headers: { ...req.headers, host: target.host },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
        answer.on('error', () => res.destroy());
      },
    );
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return { base, requests, requestsOf: (url) => requests.filter((r) => r.url === url) };
}
