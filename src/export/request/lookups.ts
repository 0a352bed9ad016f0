/**
 * Key and book lookups, on a pool apart from the exports'; an outage is a DependencyError (503, D8.5).
 * Keys are always verified on the primary (decisions.md D11.2); the book and its change state are
 * read where the export will read its body (`on`: a standby's pool, D11.3), the primary by default.
 */
import { parseBearer, verifyApiKey } from '../../auth/api-key.js';
import type { Sql } from '../../db/connect.js';
import { asDatabaseOutage, withTimeout } from '../../db/dependency.js';
import { inTransaction } from '../../db/transaction.js';
import type { OutageLog } from '../../db/outage-log.js';
import { ApiError, DependencyError, type Dependency } from '../../errors.js';
import { readChangeState, type ChangeState } from '../snapshot/changes-query.js';
import { findBook, type BookLookup } from '../snapshot/query.js';

export class Lookups {
  #inFlight = 0;

  constructor(
    private readonly sql: Sql,
    private readonly timeoutMs: number,
    private readonly outages: OutageLog,
  ) {}

  get inFlight(): number {
    return this.#inFlight;
  }

  /** The caller of an `Authorization` header. Throws ApiError INVALID_API_KEY (export-api.md 5, D5.2). */
  async caller(authorization: string | string[] | undefined): Promise<{ userId: string; keyId: string }> {
    const token = parseBearer(authorization);
    const caller = token === null ? null : await this.#run(() => verifyApiKey(this.sql, token), 'API key lookup');
    if (caller === null) throw new ApiError('INVALID_API_KEY');
    return caller;
  }

  /** The book `slug` of `userId`, read on `on`; throws ApiError BOOK_NOT_FOUND, also for another owner's (export-api.md 7). */
  async book(userId: string, slug: string, on: Sql = this.sql): Promise<BookLookup> {
    const book = await this.#run(() => findBook((text, params) => on.unsafe<BookLookup[]>(text, params), userId, slug), 'book lookup', this.#where(on));
    if (book === undefined) throw new ApiError('BOOK_NOT_FOUND');
    return book;
  }

  /** The change state of book `bookId` now, read on `on` in one snapshot (decisions.md D12.1), for a HEAD's change token. */
  async changeState(bookId: string, on: Sql = this.sql): Promise<ChangeState> {
    const read = () => inTransaction(on, (tx) => readChangeState((text, params) => tx.unsafe(text, params), bookId), { mode: 'ISOLATION LEVEL REPEATABLE READ READ ONLY' });
    return this.#run(read, 'change state', this.#where(on));
  }

  /** A standby's outage is the replica's, never the database's (D10.6, D11.7). */
  #where(on: Sql): Dependency {
    return on === this.sql ? 'database' : 'replica';
  }

  async #run<T>(work: () => Promise<T>, what: string, where: Dependency = 'database'): Promise<T> {
    this.#inFlight++;
    try {
      const result = await withTimeout(work(), this.timeoutMs, where, what);
      if (where === 'database') this.outages.ok('database');
      return result;
    } catch (err) {
      const outage = asDatabaseOutage(err, where === 'replica');
      if (outage && where === 'replica' && outage.dependency !== 'replica') {
        throw new DependencyError('replica', outage.message, { cause: err });
      }
      throw outage ?? err;
    } finally {
      this.#inFlight--;
    }
  }
}
