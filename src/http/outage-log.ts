/**
 * Outages of the services kb-export depends on, logged once when one starts and once when it ends,
 * not once per request (decisions.md D8.5): during an outage every request fails the same way.
 */
import type { Dependency } from '../db/dependency.js';

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class OutageLog {
  readonly #down = new Map<Dependency, { since: number; failures: number }>();

  constructor(private readonly log: Log) {}

  /** Whether `dependency` failed last time it was used. */
  isDown(dependency: Dependency): boolean {
    return this.#down.has(dependency);
  }

  /** Records a failure of `dependency`; logs it when it begins an outage. */
  failed(dependency: Dependency, err: unknown): void {
    const outage = this.#down.get(dependency);
    if (outage !== undefined) {
      outage.failures++;
      return;
    }
    this.#down.set(dependency, { since: Date.now(), failures: 1 });
    this.log.warn({ dependency, err }, `${dependency} unavailable: answering 503 until it is back`);
  }

  /** Records a success of `dependency`; logs the end of its outage, if it had one. */
  ok(dependency: Dependency): void {
    const outage = this.#down.get(dependency);
    if (outage === undefined) return;
    this.#down.delete(dependency);
    this.log.info({ dependency, ms: Date.now() - outage.since, failures: outage.failures }, `${dependency} available again`);
  }
}
