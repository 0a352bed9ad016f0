/** The two log lines of an export (D10.5): user and key ids, never the key. */
import { type GoneReason } from '../errors.js';
import type { FastifyBaseLogger } from 'fastify';

/** How an export ended; `rejected`: refused by admission (503 queue, 429 per user). */
export type ExportOutcome = 'complete' | 'client_gone' | 'failed' | 'rejected';

interface ExportLogFields {
  userId: string;
  keyId: string;
  bookSlug: string;
  excludeCategories: boolean;
  includeContentHtml: boolean;
  format: string;
  /** The Content-Encoding (D9.3); `bytes` counts what went on the wire. */
  encoding: string;
  /** Where the body is read: `primary` or `replica N` (D11.2, D10.6). */
  source: string;
}

/**
 * Why a failed export failed, for metrics: a standby's recovery conflict (D11.5), a
 * lost fleet-wide lease (D11.1), or anything else.
 */
export type FailureCause = 'recovery_conflict' | 'lease_lost' | 'other';

/** What the end of an export reports, for metrics (D10.3); `cause` only for `failed`. */
export type ExportEnded = (outcome: ExportOutcome, bytes: number, ms: number, cause?: FailureCause) => void;

interface ExportEnd {
  count?: number;
  bytes?: number;
  reason?: GoneReason | string;
  cached?: boolean;
  /** Of a failure (logged as `cause`). */
  cause?: FailureCause;
}

export class ExportLog {
  readonly #log: FastifyBaseLogger;
  readonly #fields: ExportLogFields;
  readonly #report: ExportEnded;
  #startedAt = 0;
  #ended = false;

  constructor(log: FastifyBaseLogger, fields: ExportLogFields, ended: ExportEnded) {
    this.#log = log;
    this.#fields = fields;
    this.#report = ended;
  }

  /** The export reads `source` instead of the one it started with (a fallback to the primary). */
  readFrom(source: string): void {
    this.#fields.source = source;
  }

  start(): void {
    this.#startedAt = Date.now();
    this.#log.info({ ...this.#fields }, 'export started');
  }

  end(outcome: ExportOutcome, end: ExportEnd = {}): void {
    if (this.#ended) return;
    this.#ended = true;
    const ms = Date.now() - this.#startedAt;
    this.#report(outcome, end.bytes ?? 0, ms, outcome === 'failed' ? (end.cause ?? 'other') : undefined);
    const line = { ...this.#fields, outcome, count: end.count ?? null, bytes: end.bytes ?? 0, ms, ...end };
    if (outcome === 'failed') this.#log.warn(line, 'export ended');
    else this.#log.info(line, 'export ended');
  }
}
