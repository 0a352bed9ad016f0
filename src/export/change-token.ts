/** Change tokens (D12.1, D12.4, D12.7, D12.8); what a token binds, and its layout: docs/architecture.md. */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Sql } from '../db/connect.js';
import { ApiError, DependencyError } from '../errors.js';
import { VISIBLE_MAX, type ChangeState } from './change-state.js';
import { MAX_CHANGED_SINCE_CHARS } from '../http/routes.js';
import type { ChangeSince } from './snapshot/changes-query.js';
import {
  KIND,
  listBytes,
  parseSnapshot,
  Reader,
  readSeen,
  saw,
  sinceOf,
  writeVarint,
  type Kind,
  type Seen,
} from './change-token-seen.js';
import type { ExportOptions } from './request/export-request.js';

const VERSION = 2;
const HASH_BYTES = 8;
const EPOCH_BYTES = 16;
const MAC_BYTES = 16;
const AT = { book: 2, database: 10, prefix: 18, format: 26, epoch: 34 } as const;
const FIXED_BYTES = AT.epoch + EPOCH_BYTES;
/** The most bytes a token's list of xids takes: past it, the token names the snapshot's horizon alone. */
const LIST_MAX_BYTES = 2048;
/** Varints after the fixed part: issue time, timeline, xmin, span, kind, count (10 bytes at most each). */
const MAX_TOKEN_BYTES = FIXED_BYTES + 6 * 10 + LIST_MAX_BYTES + MAC_BYTES;
/** No token is longer (base64url of MAX_TOKEN_BYTES), so every one fits the `changedSince` parameter (D12.8). */
export const MAX_TOKEN_CHARS = Math.ceil((MAX_TOKEN_BYTES * 4) / 3);
if (MAX_TOKEN_CHARS > MAX_CHANGED_SINCE_CHARS)
  throw new Error(`change tokens of ${MAX_TOKEN_CHARS} characters would not fit changedSince`);
const MAC_LABEL = 'kb-export change token\0';

type InvalidReason = 'malformed' | 'forged' | 'other-book' | 'recreated-book' | 'other-options' | 'other-prefix';
type ExpiredReason = 'expired' | 'pruned' | 'other-database' | 'other-format' | 'other-timeline' | 'ahead';

/** A token this request cannot use: 400 INVALID_PARAMETER (D12.4); `reason` says which check failed. */
export class InvalidChangeTokenError extends ApiError {
  override name = 'InvalidChangeTokenError';
  constructor(
    readonly reason: InvalidReason,
    message: string,
  ) {
    super('INVALID_PARAMETER', message);
  }
}

/** 410 CHANGE_TOKEN_EXPIRED (D12.4, D12.8). */
export class ExpiredChangeTokenError extends ApiError {
  override name = 'ExpiredChangeTokenError';
  constructor(
    readonly reason: ExpiredReason,
    message: string,
  ) {
    super('CHANGE_TOKEN_EXPIRED', message);
  }
}

/**
 * A hot standby that has not replayed everything the token saw, or replays another timeline: the
 * request goes to the primary, never a 410 (D12.7). A replica's outage for every other rule.
 */
export class StandbyBehindTokenError extends DependencyError {
  override name = 'StandbyBehindTokenError';
  constructor(message: string) {
    super('replica', message);
  }
}

const hashOf = (label: string, value: string) =>
  createHash('sha256').update(`${label}\0${value}`).digest().subarray(0, HASH_BYTES);

const describe = (o: ExportOptions) =>
  `excludeCategories=${o.excludeCategories}&includeContentHtml=${o.includeContentHtml}`;

function header(state: ChangeState, opts: ExportOptions, prefixHash: Buffer, formatHash: Buffer): Buffer {
  const epoch = Buffer.from(state.changeEpoch.replace(/-/g, ''), 'hex');
  if (epoch.length !== EPOCH_BYTES) throw new Error(`not a change epoch: ${state.changeEpoch}`);
  return Buffer.concat([
    Buffer.from([VERSION, (opts.excludeCategories ? 1 : 0) | (opts.includeContentHtml ? 2 : 0)]),
    hashOf('book', state.bookId),
    hashOf('database', state.databaseId),
    prefixHash,
    formatHash,
    epoch,
  ]);
}

export interface ChangeTokenConfig {
  secret: Buffer;
  retentionDays: number;
  mediaProxyPrefix: string;
  /** The output format version the ETags carry (D9.1). */
  outputFormat: string;
}

export class ChangeTokens {
  private readonly prefixHash: Buffer;
  private readonly formatHash: Buffer;

  constructor(private readonly config: ChangeTokenConfig) {
    if (config.secret.length < 16) throw new Error('change token secret too short');
    this.prefixHash = hashOf('prefix', config.mediaProxyPrefix);
    this.formatHash = hashOf('format', config.outputFormat);
  }

  private mac(body: Buffer): Buffer {
    return createHmac('sha256', this.config.secret).update(MAC_LABEL).update(body).digest().subarray(0, MAC_BYTES);
  }

  /**
   * The `Export-Change-Token` of an export read in `state`: at most MAX_TOKEN_CHARS, exact (D12.3)
   * unless both the running and the visible list are too long to carry.
   */
  issue(state: ChangeState, opts: ExportOptions): string {
    const snap = parseSnapshot(state.snapshot);
    // A standby's pg_current_snapshot() lists no running xids (PostgreSQL keeps them elsewhere there).
    const lists: [Kind, bigint[]][] = [];
    if (!state.inRecovery) lists.push([KIND.running, snap.xip]);
    if (state.visible !== null && state.visible.length <= VISIBLE_MAX) lists.push([KIND.visible, state.visible]);
    let kind: Kind = KIND.horizon;
    let list = listBytes([], snap.xmin);
    for (const [k, xids] of lists) {
      const bytes = listBytes(xids, snap.xmin);
      if (bytes.length <= LIST_MAX_BYTES && (kind === KIND.horizon || bytes.length < list.length))
        [kind, list] = [k, bytes];
    }
    const tail: number[] = [];
    writeVarint(tail, BigInt(Math.floor(state.nowS)));
    writeVarint(tail, BigInt(state.timeline));
    writeVarint(tail, snap.xmin);
    writeVarint(tail, snap.xmax - snap.xmin);
    writeVarint(tail, BigInt(kind));
    const body = Buffer.concat([
      header(state, opts, this.prefixHash, this.formatHash),
      Buffer.from(tail),
      Buffer.from(list),
    ]);
    return Buffer.concat([body, this.mac(body)]).toString('base64url');
  }

  /** The token's verified body, or null when it is not one this service issued in this version. */
  private open(token: string): Buffer | null {
    const raw =
      token.length <= MAX_TOKEN_CHARS && /^[A-Za-z0-9_-]+$/.test(token)
        ? Buffer.from(token, 'base64url')
        : Buffer.alloc(0);
    if (raw.length < FIXED_BYTES + MAC_BYTES) return null;
    const body = raw.subarray(0, raw.length - MAC_BYTES);
    return timingSafeEqual(this.mac(body), raw.subarray(raw.length - MAC_BYTES)) ? body : null;
  }

  /**
   * Whether a hot standby whose snapshots' xmin is `standbyXmin` has finished every transaction the
   * token's snapshot may have seen (D12.7). True for a token it cannot read: the export refuses that
   * one wherever it runs.
   */
  answerableAbove(token: string, standbyXmin: string): boolean {
    const body = this.open(token);
    if (body === null || body[0] !== VERSION) return true;
    try {
      return BigInt(standbyXmin) >= readSeen(new Reader(body.subarray(FIXED_BYTES))).seen.xmax;
    } catch {
      return true;
    }
  }

  /**
   * What a delta since `token` compares with, read in `state`. Throws InvalidChangeTokenError (400),
   * ExpiredChangeTokenError (410), or StandbyBehindTokenError when `state` is a standby's that has
   * not replayed what the token saw (D12.7).
   */
  accept(token: string, state: ChangeState, opts: ExportOptions): ChangeSince {
    const body = this.verified(token);
    this.checkBinding(body, state, opts);
    let issuedS: bigint;
    let seen: Seen;
    try {
      ({ issuedS, seen } = readSeen(new Reader(body.subarray(FIXED_BYTES))));
    } catch {
      // Only a bug of our own makes a genuine token unreadable: it is still not one to honour.
      throw new InvalidChangeTokenError('malformed', 'changedSince is not a change token');
    }
    if (state.nowS - Number(issuedS) > this.config.retentionDays * 86_400) {
      throw new ExpiredChangeTokenError(
        'expired',
        `changedSince is older than CHANGE_RETENTION_DAYS (${this.config.retentionDays} days)`,
      );
    }
    if (BigInt(state.tokenFloor) > seen.xmin) {
      throw new ExpiredChangeTokenError('pruned', 'changedSince is older than the removals this service keeps');
    }
    checkHistory(seen, state);
    return sinceOf(seen);
  }

  /** The body of a token this service issued in this version; else 400, or 410 for an earlier release's. */
  private verified(token: string): Buffer {
    const body = this.open(token);
    if (body === null) {
      const raw = /^[A-Za-z0-9_-]*$/.test(token) ? Buffer.from(token, 'base64url') : Buffer.alloc(0);
      if (
        token.length > MAX_TOKEN_CHARS ||
        raw.length < FIXED_BYTES + MAC_BYTES ||
        (raw[0] !== VERSION && raw[0] !== 1)
      ) {
        throw new InvalidChangeTokenError('malformed', 'changedSince is not a change token');
      }
      throw new InvalidChangeTokenError('forged', 'changedSince is not a change token this service issued');
    }
    if (body[0] !== VERSION) {
      throw new ExpiredChangeTokenError(
        'other-format',
        'changedSince was issued by an earlier release of kb-export: take a full export once',
      );
    }
    return body;
  }

  /** The book, its incarnation, the database, the options, the prefix and the output format the token names are this request's (D12.4). */
  private checkBinding(body: Buffer, state: ChangeState, opts: ExportOptions): void {
    const want = header(state, opts, this.prefixHash, this.formatHash);
    const same = (start: number, bytes: number) =>
      body.subarray(start, start + bytes).equals(want.subarray(start, start + bytes));
    if (!same(AT.book, HASH_BYTES))
      throw new InvalidChangeTokenError('other-book', 'changedSince was issued for another knowledge base');
    if (!same(AT.database, HASH_BYTES)) {
      throw new ExpiredChangeTokenError(
        'other-database',
        'changedSince was issued by another database (restored or upgraded since)',
      );
    }
    if (!same(AT.epoch, EPOCH_BYTES)) {
      throw new InvalidChangeTokenError(
        'recreated-book',
        'changedSince was issued before this knowledge base was deleted and created again',
      );
    }
    if (body[1] !== want[1]) {
      const bits = body[1]!;
      const issued = describe({ excludeCategories: (bits & 1) !== 0, includeContentHtml: (bits & 2) !== 0 });
      throw new InvalidChangeTokenError(
        'other-options',
        `changedSince was issued for ${issued}, not ${describe(opts)}`,
      );
    }
    if (!same(AT.prefix, HASH_BYTES))
      throw new InvalidChangeTokenError('other-prefix', 'changedSince was issued under another media proxy prefix');
    if (!same(AT.format, HASH_BYTES)) {
      throw new ExpiredChangeTokenError(
        'other-format',
        'changedSince was issued by a server release with another output format',
      );
    }
  }
}

/**
 * Whether the server that read `state` has everything the token saw: a standby that has finished
 * every transaction below the token's xmax on its timeline, else StandbyBehindTokenError (the primary
 * answers, D12.7); a primary on the token's timeline whose snapshot follows the token's, else 410 (D12.8).
 */
function checkHistory(seen: Seen, state: ChangeState): void {
  const now = parseSnapshot(state.snapshot);
  const sameTimeline = seen.timeline === BigInt(state.timeline);
  if (state.inRecovery) {
    if (!sameTimeline)
      throw new StandbyBehindTokenError(
        `the standby replays timeline ${state.timeline}, changedSince was issued on ${seen.timeline}`,
      );
    if (now.xmin < seen.xmax)
      throw new StandbyBehindTokenError('the standby has not replayed every transaction changedSince saw');
    return;
  }
  if (!sameTimeline) {
    throw new ExpiredChangeTokenError(
      'other-timeline',
      `changedSince was issued on timeline ${seen.timeline}, before a failover to timeline ${state.timeline} that may have lost transactions it saw: take a full export`,
    );
  }
  if (seen.xmax > now.xmax || now.xip.some((x) => saw(seen, x))) {
    throw new ExpiredChangeTokenError(
      'ahead',
      'changedSince saw transactions this database does not have (restored or failed over since): take a full export',
    );
  }
}

/** Every instance shares it (sql/0006_change_tracking.sql). */
export async function loadChangeTokenSecret(sql: Sql): Promise<Buffer> {
  const [row] = await sql<{ token_secret: Buffer }[]>`SELECT token_secret FROM change_tracking`;
  if (!row) throw new Error('change_tracking has no row: the change token secret is missing (run kb-export migrate)');
  return row.token_secret;
}

/** The change tokens of a database (D12.1), their secret read once from it; read again after a failure. */
export class ChangeTokenSource {
  #tokens: Promise<ChangeTokens> | null = null;

  constructor(
    private readonly sql: Sql,
    private readonly config: Omit<ChangeTokenConfig, 'secret'>,
  ) {}

  /** Rejects with the database's error while the secret cannot be read. */
  get(): Promise<ChangeTokens> {
    this.#tokens ??= loadChangeTokenSecret(this.sql).then((secret) => new ChangeTokens({ ...this.config, secret }));
    this.#tokens.catch(() => (this.#tokens = null));
    return this.#tokens;
  }
}
