/** A TCP socket's bytes the kernel holds unacknowledged (D8.3): Linux /proc, null elsewhere (bench/optimisations.md). */
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

/** tx_queue of `inode`'s row in /proc/net/tcp (sl local rem st tx_queue:rx_queue tr retrnsmt uid timeout inode). */
function txQueueOf(text: string, inode: string): number | null {
  const needle = ` ${inode} `;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) {
    const start = text.lastIndexOf('\n', at) + 1;
    const end = text.indexOf('\n', at);
    const fields = text
      .slice(start, end === -1 ? undefined : end)
      .trim()
      .split(/\s+/);
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
