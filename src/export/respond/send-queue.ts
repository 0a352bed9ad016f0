/**
 * Bytes the kernel still holds for a TCP socket that its peer has not acknowledged: the part of
 * "what the client has not accepted yet" that Node's own counters cannot see (decisions.md D8.3).
 *
 * Why it is needed: res.writableLength (Node's queue) only moves when the kernel wakes the socket
 * for writing, and Linux does that once about a third of the send buffer is free. The send buffer
 * autotunes up to tcp_wmem's maximum (4 MB by default), so measured on loopback (Node 20,
 * Linux 6.x) a client reading 256 KB/s shows progress to Node in ~1.5 MB steps every ~5.5 s,
 * and any rule on Node's counters alone cannot tell such a client from a stalled one within a
 * few seconds. Linux reports, per socket, the bytes queued and not yet acknowledged as tx_queue in
 * /proc/self/net/tcp (tcp6 for IPv6 sockets, IPv4-mapped ones included); it moves with each window
 * update the client's kernel sends, i.e. as the client reads. Those updates come in steps too (the
 * client's kernel reopens a closed window only once a sixteenth of its receive buffer is free):
 * measured on loopback, the longest wait for a step was ~1.7 s at 256 KB/s, ~2.7 s at 128 KB/s and
 * 4–5 s at 32–64 KB/s, against 5.7 s at 256 KB/s and none in 13 s at 128 KB/s on Node's counters.
 *
 * The probe finds the socket's row by the inode of its file descriptor. It answers null where that
 * is not available (not Linux, no /proc, a socket without a descriptor); the caller then counts
 * Node's queue only, with the coarse steps described above. Reads of a table are shared for
 * TABLE_TTL_MS, so writers sampling together cost one read.
 */
import { readFile, readlink } from 'node:fs/promises';
import type { Socket } from 'node:net';

/** Resolves to the socket's unacknowledged bytes in the kernel, or null when unknown. Never rejects. */
export type SendQueueProbe = () => Promise<number | null>;

const TABLE_TTL_MS = 50;
const tables = new Map<string, { at: number; text: Promise<string | null> }>();

function table(file: string): Promise<string | null> {
  const now = Date.now();
  const cached = tables.get(file);
  if (cached !== undefined && now - cached.at < TABLE_TTL_MS) return cached.text;
  const text = readFile(file, 'latin1').catch(() => null);
  tables.set(file, { at: now, text });
  return text;
}

/**
 * tx_queue (bytes) of the row of `inode` in the text of a /proc/net/tcp or tcp6 table, or null
 * when no row has that inode. Columns: sl local rem st tx_queue:rx_queue tr:when retrnsmt uid timeout inode …
 */
function txQueueOf(text: string, inode: string): number | null {
  const needle = ` ${inode} `;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) {
    const start = text.lastIndexOf('\n', at) + 1;
    const end = text.indexOf('\n', at);
    const fields = text.slice(start, end === -1 ? undefined : end).trim().split(/\s+/);
    // The same digits may be another column (a uid, a timeout): only the inode column counts.
    if (fields[9] !== inode) continue;
    const tx = /^([0-9A-Fa-f]+):[0-9A-Fa-f]+$/.exec(fields[4] ?? '');
    return tx ? parseInt(tx[1]!, 16) : null;
  }
  return null;
}

async function inodeOf(socket: Socket): Promise<string | null> {
  // `_handle.fd` is the descriptor of a TCP socket on Unix (-1 elsewhere); Node has no public API for it.
  const fd = (socket as unknown as { _handle?: { fd?: unknown } | null })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) return null;
  const link = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
  return /^socket:\[(\d+)\]$/.exec(link)?.[1] ?? null;
}

/** A probe of `socket`'s unacknowledged bytes in the kernel (see the module's comment). */
export function sendQueueProbe(socket: Socket): SendQueueProbe {
  if (process.platform !== 'linux') return () => Promise.resolve(null);
  const file = socket.localAddress?.includes(':') ? '/proc/self/net/tcp6' : '/proc/self/net/tcp';
  let inode: Promise<string | null> | undefined;
  return async () => {
    inode ??= inodeOf(socket);
    const id = await inode;
    if (id === null) return null;
    const text = await table(file);
    return text === null ? null : txQueueOf(text, id);
  };
}
