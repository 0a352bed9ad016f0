/** Graceful shutdown: which connections to close while running exports finish. */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** Tracks connections so shutdown can close those that never sent a byte: Node 20 waits for them (nodejs/node#63452). */
export function trackUnusedConnections(server: Server): { closeIdle: () => void } {
  const open = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  return {
    closeIdle() {
      server.closeIdleConnections();
      for (const socket of open) if (socket.bytesRead === 0) socket.destroy();
    },
  };
}
