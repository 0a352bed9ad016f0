/**
 * The two log lines of an export (decisions.md D10.5): one when it starts, once the key, the
 * parameters and the knowledge base were checked, and one when it ends, with the outcome. Both
 * carry the request id (pino's `reqId`), the user and key ids (never the key) and the options.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { GoneReason } from '../export/respond/response-writer.js';
import type { Metrics } from '../observe/metrics.js';

/**
 * How an export ended: its whole body sent, the client gone (or dropped as too slow), failed (an
 * error before or after the first byte), or refused by admission (503 queue, 429 per user).
 */
export type ExportOutcome = 'complete' | 'client_gone' | 'failed' | 'rejected';

interface ExportLogFields {
  userId: string;
  keyId: string;
  bookSlug: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  /** `json` or `ndjson` (decisions.md D9.4). */
  format: string;
  /** The Content-Encoding (D9.3); `bytes` counts what went on the wire. */
  encoding: string;
}

interface ExportEnd {
  count?: number;
  bytes?: number;
  reason?: GoneReason | string;
  /** Served from the export cache. */
  cached?: boolean;
}

/** An export's log: start() once, then end() once (later calls are ignored). */
export class ExportLog {
  readonly #log: FastifyBaseLogger;
  readonly #fields: ExportLogFields;
  readonly #metrics: Metrics | undefined;
  #startedAt = 0;
  #ended = false;

  /** `metrics` counts the export's outcome, duration and bytes when it ends (decisions.md D10.3). */
  constructor(log: FastifyBaseLogger, fields: ExportLogFields, metrics?: Metrics) {
    this.#log = log;
    this.#fields = fields;
    this.#metrics = metrics;
  }

  start(): void {
    this.#startedAt = Date.now();
    this.#log.info({ ...this.#fields }, 'export started');
  }

  end(outcome: ExportOutcome, end: ExportEnd = {}): void {
    if (this.#ended) return;
    this.#ended = true;
    const ms = Date.now() - this.#startedAt;
    this.#metrics?.exportEnded(outcome, end.bytes ?? 0, ms);
    const line = { ...this.#fields, outcome, count: end.count ?? null, bytes: end.bytes ?? 0, ms, ...end };
    if (outcome === 'failed') this.#log.warn(line, 'export ended');
    else this.#log.info(line, 'export ended');
  }
}
