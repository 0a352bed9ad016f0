/**
 * A TCP proxy on 127.0.0.1 in front of a real service (PostgreSQL, in the fault tests), whose link
 * the test cuts, freezes, refuses or slows while real traffic runs through it.
 *
 * Each connection is two sockets (client side, upstream side) and two one-way pumps between them.
 * A pump holds at most one chunk it has read but not yet forwarded (a throttled remainder); for the
 * rest it pauses its source until the destination drains, so memory stays bounded whatever the
 * traffic, and a frozen link fills the kernel's buffers like a real one.
 */
import { once } from 'node:events';
import net, { type AddressInfo, type Socket } from 'node:net';

export interface ProxyStats {
  /** Connections accepted (refused ones included). */
  accepted: number;
  /** Connections open now. */
  open: number;
  /** Bytes forwarded upstream -> client, and client -> upstream. */
  bytesToClient: number;
  bytesToUpstream: number;
  /** Connections destroyed by cutAll() or cutAfter(). */
  cuts: number;
}

export interface TcpProxy {
  readonly port: number;
  /** `url` (e.g. a postgres:// URL) with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** Destroys every open connection now (both sides). Returns how many. */
  cutAll(): number;
  /**
   * Arms a cut: the first connection (open now or opened later) that has forwarded `bytes` more
   * bytes upstream -> client is destroyed there, mid-message as it may be; then the cut is
   * disarmed. `null` disarms it.
   */
  cutAfter(bytes: number | null): void;
  /** Arms cutAfter(`bytes`) again after every cut it makes, until called with `null`. */
  cutEvery(bytes: number | null): void;
  /**
   * Freezes the link: nothing is forwarded in either direction and nothing is closed, not even a
   * side that closes meanwhile (its peer learns of it on resume()), as when a network path dies.
   */
  stall(): void;
  /** Ends a stall: forwarding goes on, and closes that happened during it are passed on. */
  resume(): void;
  /** While on, new connections are closed as soon as they are accepted. */
  refuse(on: boolean): void;
  /** Limits each direction of each connection to `bytesPerSecond` (null: no limit). */
  throttle(bytesPerSecond: number | null): void;
  stats(): ProxyStats;
  /** Stops listening and destroys every connection. */
  close(): Promise<void>;
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** One direction of a connection. */
class Pump {
  /** Read from `from` but not yet written to `to` (throttling), at most one chunk. */
  private pending: Buffer | null = null;
  /** `from` sent its FIN: `to` is ended once `pending` is written. */
  private ended = false;
  private waitingDrain = false;
  /** Forwards nothing more: its link is being cut. */
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;
  /** Earliest time the next byte may go, when throttled. */
  private nextAt = 0;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private readonly link: Link,
    readonly toClient: boolean,
  ) {
    from.on('data', (chunk: Buffer) => {
      if (this.stopped) return;
      this.pending = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
      from.pause();
      this.flush();
    });
    from.on('end', () => {
      this.ended = true;
      this.flush();
    });
    to.on('drain', () => {
      this.waitingDrain = false;
      this.flush();
    });
  }

  /** Forwards what is pending as the link's state allows, then reads more (or passes the FIN on). */
  flush(): void {
    const { link, from, to } = this;
    const proxy = link.proxy;
    if (
      this.stopped ||
      proxy.stalled ||
      this.waitingDrain ||
      this.timer !== null ||
      to.destroyed ||
      link.closed ||
      to.connecting
    )
      return;
    while (this.pending !== null) {
      let piece = this.pending;
      if (proxy.rate !== null) {
        const now = Date.now();
        if (now < this.nextAt) {
          this.timer = setTimeout(() => {
            this.timer = null;
            this.flush();
          }, this.nextAt - now);
          return;
        }
        // At most a tenth of a second's worth at a time, so the rate holds at small scales too.
        piece = piece.subarray(0, Math.max(1, Math.floor(proxy.rate / 10)));
        this.nextAt = Math.max(now, this.nextAt) + (piece.length * 1000) / proxy.rate;
      }
      if (this.toClient && link.budget !== null && piece.length >= link.budget) {
        // The armed cut fires here: what is left of the budget goes, then the link is cut.
        const allowed = link.budget;
        proxy.fired();
        proxy.counted.bytesToClient += allowed;
        if (allowed > 0) link.cutOnceWritten(piece.subarray(0, allowed));
        else link.cut();
        return;
      }
      if (!this.toClient) proxy.counted.bytesToUpstream += piece.length;
      else {
        proxy.counted.bytesToClient += piece.length;
        if (link.budget !== null) link.budget -= piece.length;
      }
      this.pending = piece.length === this.pending.length ? null : this.pending.subarray(piece.length);
      if (!to.write(piece)) {
        this.waitingDrain = true;
        return;
      }
    }
    if (this.ended) to.end();
    else if (from.isPaused()) from.resume();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.pending = null;
  }
}

/** One proxied connection; both sockets are half-open capable, each FIN is passed on by its pump. */
class Link {
  closed = false;
  /** Bytes still allowed upstream -> client before an armed cut fires on this link. */
  budget: number | null = null;
  /** A side was reset during a stall: its peer is reset at resume(). */
  private deferredReset = false;
  private readonly pumps: Pump[];
  private open = 2;

  constructor(
    readonly proxy: Proxy,
    readonly client: Socket,
    readonly upstream: Socket,
  ) {
    for (const s of [client, upstream]) {
      // Read only through the pumps, never in flowing mode: nothing piles up during a stall.
      s.pause();
      // A reset is a way of closing like any other; the 'close' handler passes it on.
      s.on('error', () => {});
      s.on('close', (hadError) => this.sideClosed(s, hadError));
    }
    this.pumps = [new Pump(upstream, client, this, true), new Pump(client, upstream, this, false)];
    upstream.once('connect', () => this.flush());
  }

  flush(): void {
    for (const p of this.pumps) p.flush();
  }

  private sideClosed(side: Socket, hadError: boolean): void {
    this.open--;
    if (this.closed) return;
    if (this.open === 0) {
      this.finish();
      return;
    }
    // A clean close was passed on as a FIN by the pump; a reset (or a side that closed without
    // its FIN, like a refused upstream) resets the peer, unless the link is frozen.
    if (hadError || !side.readableEnded) {
      if (this.proxy.stalled) this.deferredReset = true;
      else this.finish();
    }
  }

  /** Called on resume(). */
  resumed(): void {
    if (this.deferredReset) this.finish();
    else this.flush();
  }

  /**
   * The armed cut: `last` goes to the client, then the link is cut once the kernel has it (a second
   * at most), so that every byte counted as sent was sent and not dropped from the socket's queue.
   */
  cutOnceWritten(last: Buffer): void {
    for (const p of this.pumps) p.stop();
    const timer = setTimeout(() => this.cut(), 1000);
    this.client.write(last, () => {
      clearTimeout(timer);
      this.cut();
    });
  }

  cut(): void {
    if (this.closed) return;
    this.proxy.counted.cuts++;
    this.finish();
  }

  /** Destroys both sides and forgets the link. */
  finish(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.pumps) p.stop();
    this.client.destroy();
    this.upstream.destroy();
    this.proxy.forget(this);
  }
}

class Proxy implements TcpProxy {
  stalled = false;
  rate: number | null = null;
  refusing = false;
  readonly counted = { accepted: 0, bytesToClient: 0, bytesToUpstream: 0, cuts: 0 };
  private readonly links = new Set<Link>();
  /** The armed cutAfter() budget for links opened later; null when disarmed. */
  private armed: number | null = null;
  /** cutEvery()'s budget, armed again after each cut. */
  private every: number | null = null;

  constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  accept(client: Socket, host: string, targetPort: number): void {
    this.counted.accepted++;
    if (this.refusing) {
      client.on('error', () => {});
      client.destroy();
      return;
    }
    const upstream = net.connect({ port: targetPort, host, allowHalfOpen: true });
    const link = new Link(this, client, upstream);
    link.budget = this.armed;
    this.links.add(link);
  }

  forget(link: Link): void {
    this.links.delete(link);
  }

  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  cutAll(): number {
    const links = [...this.links];
    for (const l of links) l.cut();
    return links.length;
  }

  cutAfter(bytes: number | null): void {
    if (bytes !== null && !(Number.isInteger(bytes) && bytes >= 0)) throw new RangeError(`cutAfter: ${bytes}`);
    this.armed = bytes;
    for (const l of this.links) l.budget = bytes;
  }

  cutEvery(bytes: number | null): void {
    this.every = bytes;
    this.cutAfter(bytes);
  }

  /** An armed cut fired: disarmed, or armed again for cutEvery(). */
  fired(): void {
    this.cutAfter(this.every);
  }

  stall(): void {
    this.stalled = true;
    for (const l of this.links) {
      l.client.pause();
      l.upstream.pause();
    }
  }

  resume(): void {
    this.stalled = false;
    for (const l of [...this.links]) l.resumed();
  }

  refuse(on: boolean): void {
    this.refusing = on;
  }

  throttle(bytesPerSecond: number | null): void {
    if (bytesPerSecond !== null && !(bytesPerSecond > 0)) throw new RangeError(`throttle: ${bytesPerSecond}`);
    this.rate = bytesPerSecond;
    if (bytesPerSecond === null) for (const l of this.links) l.flush();
  }

  stats(): ProxyStats {
    return { ...this.counted, open: this.links.size };
  }

  async close(): Promise<void> {
    this.stalled = false;
    for (const l of [...this.links]) l.finish();
    if (this.server.listening) {
      this.server.close();
      await once(this.server, 'close');
    }
  }
}

/** Starts a proxy on 127.0.0.1:0 in front of `target`; closed at the test's teardown. */
export async function startTcpProxy(t: Teardown, target: { host: string; port: number }): Promise<TcpProxy> {
  let proxy!: Proxy;
  const server = net.createServer({ allowHalfOpen: true }, (client) => proxy.accept(client, target.host, target.port));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  proxy = new Proxy(server, (server.address() as AddressInfo).port);
  t.teardown(() => proxy.close());
  return proxy;
}

/** The host and port a postgres:// URL points at. */
export function targetOf(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 5432) };
}
