/** Free TCP ports for servers this process starts (embedded PostgreSQL, benchmarks, tests). */
import net from 'node:net';

/** A port free on 127.0.0.1 now; another process may still take it first. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
