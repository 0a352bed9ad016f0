/**
 * Key and book lookups, on a pool apart from the exports'; an outage is a DependencyError (503, D8.5).
 * Keys are always verified on the primary (D11.2); the book, and whatever else a request
 * reads before its export (`read`), where the export will read its body (`on`: a standby's pool,
 * D11.3), the primary by default.
 */
import { parseBearer, verifyApiKey } from '../../auth/api-key.js';
import type { Sql } from '../../db/connect.js';
import { asDatabaseOutage, withTimeout } from '../../db/dependency.js';
import type { OutageLog } from '../../db/outage-log.js';
import { ApiError, DependencyError, type Dependency } from '../../errors.js';
import { findBook, type BookLookup } from './book.js';
import type { Caller } from './export-request.js';

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
  async caller(authorization: string | string[] | undefined): Promise<Caller> {
    const token = parseBearer(authorization);
    const caller = token === null ? null : await this.#run(() => verifyApiKey(this.sql, token), 'API key lookup');
    if (caller === null) throw new ApiError('INVALID_API_KEY');
    return caller;
  }

  /** The book `slug` of `userId`, read on `on`; throws ApiError BOOK_NOT_FOUND, also for another owner's (export-api.md 7). */
  async book(userId: string, slug: string, on: Sql = this.sql): Promise<BookLookup> {
    const book = await this.#run(
      () => findBook((text, params) => on.unsafe<BookLookup[]>(text, params), userId, slug),
      'book lookup',
      this.#where(on),
    );
    if (book === undefined) throw new ApiError('BOOK_NOT_FOUND');
    return book;
  }

  /** `work` on `on` as a lookup (bounded, an outage a DependencyError of the primary or of the replica); `what` names it. */
  async read<T>(on: Sql, what: string, work: (sql: Sql) => Promise<T>): Promise<T> {
    return this.#run(() => work(on), what, this.#where(on));
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
