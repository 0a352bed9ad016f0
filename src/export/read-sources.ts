/**
 * Where exports read, chosen in one place (D11.2-D11.4, D12.7): a usable hot standby in turn, else
 * the primary. A standby that fails a request's book lookup, or has not finished every transaction
 * its `changedSince` saw, or fails the export's snapshot before the first byte, hands the request to
 * the primary; each such fallback is counted by reason and logged.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Sql } from '../db/connect.js';
import type { FallbackReason, ReplicaSet } from '../db/replica/replica-set.js';
import { DependencyError } from '../errors.js';
import { StandbyBehindTokenError, type ChangeTokens } from './change-token.js';
import type { BookLookup } from './request/book.js';
import type { ExportRequest } from './request/export-request.js';

/** A server an export reads from: the primary or one hot standby, so the ETag's version and the body come from one server (D11.3). */
export interface ReadSource {
  /** `primary` or `replica N` (its index in DATABASE_REPLICA_URL, never a host: D10.6). */
  name: string;
  /** A hot standby: its SQLSTATE 40001 and 40P01 are recovery conflicts (D11.5). */
  standby: boolean;
  /** Its pool for the book and change state lookups. */
  lookupSql: Sql;
  /** Its pool for the export's snapshot. */
  exportSql: Sql;
}

/** Where one request reads, and its book as read there (the version behind its ETag and a 304). */
export interface Located {
  source: ReadSource;
  book: BookLookup;
}

export class ReadSources {
  constructor(
    readonly primary: ReadSource,
    private readonly replicas: ReplicaSet | null,
  ) {}

  /**
   * Where `request` reads, and its book read there by `bookOn`. Throws what `bookOn` throws on the
   * primary (ApiError BOOK_NOT_FOUND, a DependencyError), or what `tokens` rejects with.
   */
  async locate(
    request: ExportRequest,
    bookOn: (sql: Sql) => Promise<BookLookup>,
    tokens: () => Promise<ChangeTokens>,
    log: FastifyBaseLogger,
  ): Promise<Located> {
    const onPrimary = async (): Promise<Located> => ({
      source: this.primary,
      book: await bookOn(this.primary.lookupSql),
    });
    const picked = this.replicas?.pick();
    if (!picked) return onPrimary();
    const source = { name: picked.name, standby: true, lookupSql: picked.sql, exportSql: picked.sql };
    let book: BookLookup;
    try {
      book = await bookOn(source.lookupSql);
    } catch (err) {
      if (!(err instanceof DependencyError && err.dependency === 'replica')) throw err;
      this.fellBack('standby_failed', source, log, err);
      return onPrimary();
    }
    if (request.changedSince !== null && !(await tokens()).answerableAbove(request.changedSince, book.snapshot_xmin)) {
      this.fellBack('behind_token', source, log);
      return onPrimary();
    }
    return { source, book };
  }

  /**
   * Whether an export that failed on `source` before its first byte may run again on the primary,
   * counted and logged when it may: a standby at fault, its connection counted as the database's.
   */
  retriesOnPrimary(source: ReadSource, err: unknown, log: FastifyBaseLogger): boolean {
    if (source === this.primary || !(err instanceof DependencyError && err.dependency !== 'redis')) return false;
    this.fellBack(err instanceof StandbyBehindTokenError ? 'behind_token' : 'standby_failed', source, log, err);
    return true;
  }

  /** Counts and logs a request sent to the primary for `reason`. */
  fellBack(reason: FallbackReason, from: ReadSource, log: FastifyBaseLogger, err?: unknown): void {
    this.replicas?.fellBack(reason);
    const why =
      reason === 'behind_token'
        ? 'it has not replayed every transaction changedSince saw'
        : 'it failed before the first byte';
    log.info(
      { replica: from.name, reason, ...(err === undefined ? {} : { err }) },
      `export reads the primary: ${from.name} ${why}`,
    );
  }
}
