/**
 * `/livez` and `/readyz` (D10.1, D10.2), outside the open API: no key, not rate
 * limited. Readiness comes from a background check of PostgreSQL (and Redis when configured) every
 * READY_PROBE_INTERVAL_MS, so a probe never costs a database round trip; a dependency that has not
 * answered within READY_STALE_MS makes the server unready, and so does shutting down (SIGTERM turns
 * it 503 before the server stops taking exports: src/server.ts). The answer names the dependency in
 * a word; the driver's error, with its hosts and ports, goes to the log once per outage (D10.6).
 */
import type { FastifyInstance } from 'fastify';
import { withTimeout } from '../db/dependency.js';
import type { OutageLog } from '../db/outage-log.js';
import type { Dependency } from '../errors.js';

const PROBE_INTERVAL_MS = 1000;
/** "answered within the last few seconds" (D10.2). */
const STALE_MS = 5000;

export interface ReadinessProbe {
  /** Named in the reason of a 503. */
  name: Dependency;
  /** Resolves when the dependency answered; rejects otherwise. */
  check(): Promise<unknown>;
}

type ReadyState = { ready: true } | { ready: false; reason: string };

/** The cached state `/readyz` answers from. */
export class Readiness {
  readonly #probes: readonly ReadinessProbe[];
  readonly #timeoutMs: number;
  readonly #outages: OutageLog;
  readonly #lastOk = new Map<string, number>();
  #timer: NodeJS.Timeout | null = null;
  #shuttingDown = false;

  /** `timeoutMs` bounds each check (DB_TIMEOUT_MS, at most the probe interval); failures go to `outages`. */
  constructor(probes: readonly ReadinessProbe[], timeoutMs: number, outages: OutageLog) {
    this.#probes = probes;
    this.#timeoutMs = Math.min(timeoutMs, PROBE_INTERVAL_MS);
    this.#outages = outages;
  }

  /** Runs the first round of checks, then one every second until stop(). */
  async start(): Promise<void> {
    await this.#round();
    const tick = () => {
      void this.#round().finally(() => {
        if (this.#timer !== null) this.#timer = setTimeout(tick, PROBE_INTERVAL_MS).unref();
      });
    };
    this.#timer = setTimeout(tick, PROBE_INTERVAL_MS).unref();
  }

  stop(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** From now on the server is not ready: it is going away (D10.2). */
  shutDown(): void {
    this.#shuttingDown = true;
  }

  state(now = Date.now()): ReadyState {
    if (this.#shuttingDown) return { ready: false, reason: 'shutting down' };
    for (const { name } of this.#probes) {
      const ok = this.#lastOk.get(name);
      if (ok === undefined || now - ok > STALE_MS) return { ready: false, reason: name };
    }
    return { ready: true };
  }

  async #round(): Promise<void> {
    await Promise.all(
      this.#probes.map(async ({ name, check }) => {
        try {
          await withTimeout(check(), this.#timeoutMs, name, 'readiness check');
          this.#lastOk.set(name, Date.now());
          this.#outages.ok(name);
        } catch (err) {
          this.#outages.failed(name, err);
        }
      }),
    );
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** What `/readyz` answers from; src/server.ts calls shutDown() on SIGTERM. */
    readiness: Readiness;
  }
}

/**
 * Registers `/livez` and `/readyz` on `app` (GET and HEAD) and decorates it with `readiness`;
 * the checks start now and stop when the app closes.
 */
export async function registerHealth(app: FastifyInstance, readiness: Readiness): Promise<void> {
  await readiness.start();
  app.decorate('readiness', readiness);
  app.addHook('onClose', async () => readiness.stop());
  const json = 'application/json; charset=utf-8';
  app.get('/livez', { exposeHeadRoute: true }, async (_req, reply) =>
    reply.type(json).header('cache-control', 'no-store').send({ status: 'ok' }),
  );
  app.get('/readyz', { exposeHeadRoute: true }, async (_req, reply) => {
    const state = readiness.state();
    reply.type(json).header('cache-control', 'no-store');
    if (state.ready) return reply.send({ status: 'ready' });
    return reply.code(503).send({ status: 'unavailable', reason: state.reason });
  });
}
