/**
 * A TCP port for a server this process starts: the embedded PostgreSQL's (db/embedded.ts), and the
 * benchmarks' and tests' servers.
 */
import net from 'node:net';

/** A TCP port free on 127.0.0.1 right now (another process may still take it before it is used). */
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
