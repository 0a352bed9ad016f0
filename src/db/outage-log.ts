/** Dependency outages, logged once when they start and once when they end, not per request (D8.5). */
import { type Dependency } from '../errors.js';

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class OutageLog {
  readonly #down = new Map<Dependency, { since: number; failures: number }>();

  constructor(private readonly log: Log) {}

  isDown(dependency: Dependency): boolean {
    return this.#down.has(dependency);
  }

  failed(dependency: Dependency, err: unknown): void {
    const outage = this.#down.get(dependency);
    if (outage !== undefined) {
      outage.failures++;
      return;
    }
    this.#down.set(dependency, { since: Date.now(), failures: 1 });
    this.log.warn({ dependency, err }, `${dependency} unavailable: answering 503 until it is back`);
  }

  ok(dependency: Dependency): void {
    const outage = this.#down.get(dependency);
    if (outage === undefined) return;
    this.#down.delete(dependency);
    this.log.info(
      { dependency, ms: Date.now() - outage.since, failures: outage.failures },
      `${dependency} available again`,
    );
  }
}
