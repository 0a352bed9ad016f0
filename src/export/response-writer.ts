/**
 * Writes to an HTTP response with backpressure: a write that fills the socket's buffer waits for
 * 'drain'. A client that goes away, or reads nothing for `stallTimeoutMs`, ends the wait with
 * ClientGoneError, and the stalled socket is destroyed (decisions.md D6.4).
 */
import type { ServerResponse } from 'node:http';

export type ClientGoneReason = 'gone' | 'stalled' | 'too-slow' | 'deadline';

export class ClientGoneError extends Error {
  override name = 'ClientGoneError';
  constructor(
    message: string,
    readonly reason: ClientGoneReason = 'gone',
  ) {
    super(message);
  }
}

export interface WriterLimits {
  stallTimeoutMs: number;
  minDrainBytesPerS: number;
  maxDurationMs: number;
}

export class ResponseWriter {
  private gone = false;
  private onGone: (() => void) | null = null;
  bytes = 0;

  private readonly stallTimeoutMs: number;
  constructor(
    private readonly res: ServerResponse,
    limits: WriterLimits,
  ) {
    this.stallTimeoutMs = limits.stallTimeoutMs;
    // 'close' before the response finished means the client went away.
    res.once('close', () => {
      if (!res.writableFinished) this.markGone();
    });
  }

  private markGone(): void {
    this.gone = true;
    this.onGone?.();
  }

  /** Whether the client went away (or was dropped for stalling). */
  get closed(): boolean {
    return this.gone;
  }

  close(): void {}

  /** Throws ClientGoneError when the client went away. */
  check(): void {
    if (this.gone) throw new ClientGoneError('client went away');
  }

  /** Writes bytes; resolves once the socket can take more. Throws ClientGoneError. */
  async write(text: Buffer): Promise<void> {
    this.check();
    if (text.length === 0) return;
    this.bytes += text.length;
    if (this.res.write(text)) return;
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.res.removeListener('drain', onDrain);
        this.onGone = null;
        if (err) reject(err);
        else resolve();
      };
      const onDrain = () => done();
      const timer = setTimeout(() => {
        // A stalled reader would otherwise hold its snapshot open for ever.
        this.res.destroy();
        this.gone = true;
        done(new ClientGoneError(`client read nothing for ${this.stallTimeoutMs} ms`));
      }, this.stallTimeoutMs);
      this.onGone = () => done(new ClientGoneError('client went away'));
      this.res.once('drain', onDrain);
    });
  }
}
