/**
 * Graceful shutdown of the HTTP server: which connections to close while running exports finish.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Tracks the server's connections so that shutdown can close the ones that never sent a byte.
 * Node 20's `closeIdleConnections()` (and so `server.close()`) counts a connection that was
 * accepted but has not begun a request as active, and waits for it until the grace period ends:
 * a client that opened a spare keep-alive connection held every shutdown for 30 s
 * (nodejs/node#63452, fixed in later Node lines by nodejs/node#63470). Memory: one Set entry per
 * open connection.
 */
export function trackUnusedConnections(server: Server): { closeIdle: () => void } {
  const open = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  return {
    /** closeIdleConnections(), and every connection that has not sent a byte; none has a request. */
    closeIdle() {
      server.closeIdleConnections();
      for (const socket of open) if (socket.bytesRead === 0) socket.destroy();
    },
  };
}
