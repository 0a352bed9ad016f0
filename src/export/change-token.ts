/** Change tokens (decisions.md D12.1, D12.4); what a token binds, and its layout: docs/architecture.md. */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Sql } from '../db/connect.js';
import { ApiError } from '../errors.js';
import type { ChangeState } from './snapshot/changes-query.js';

const VERSION = 1;
const HASH_BYTES = 8;
const EPOCH_BYTES = 16;
const MAC_BYTES = 16;
const AT = { book: 2, database: 10, prefix: 18, format: 26, epoch: 34 } as const;
const FIXED_BYTES = AT.epoch + EPOCH_BYTES;
/** Far above any real snapshot's, small enough that parsing stays cheap. */
const MAX_TOKEN_CHARS = 64 * 1024;
const MAC_LABEL = 'kb-export change token\0';

type InvalidReason = 'malformed' | 'forged' | 'other-book' | 'recreated-book' | 'other-options' | 'other-prefix';
type ExpiredReason = 'expired' | 'pruned' | 'other-database' | 'other-format' | 'ahead';

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

/** 410 CHANGE_TOKEN_EXPIRED (D12.4). `ahead`: read on a standby behind the issuer; the primary may answer. */
export class ExpiredChangeTokenError extends ApiError {
  override name = 'ExpiredChangeTokenError';
  constructor(
    readonly reason: ExpiredReason,
    message: string,
  ) {
    super('CHANGE_TOKEN_EXPIRED', message);
  }
}

/** A pg_snapshot: transactions below xmin had finished, xip were running, xmax and above had not started. */
interface PgSnapshot {
  xmin: bigint;
  xmax: bigint;
  xip: bigint[];
}

function parseSnapshot(text: string): PgSnapshot {
  const m = /^(\d+):(\d+):((?:\d+(?:,\d+)*)?)$/.exec(text);
  if (!m) throw new Error(`not a pg_snapshot: ${JSON.stringify(text)}`);
  return { xmin: BigInt(m[1]!), xmax: BigInt(m[2]!), xip: m[3] ? m[3].split(',').map(BigInt) : [] };
}

const formatSnapshot = (s: PgSnapshot) => `${s.xmin}:${s.xmax}:${s.xip.join(',')}`;

/** pg_visible_in_snapshot for a committed transaction. */
function visible(xid: bigint, s: PgSnapshot): boolean {
  return xid < s.xmin || (xid < s.xmax && !s.xip.includes(xid));
}

/** Whether every committed transaction visible in `earlier` is visible in `later`. */
function follows(later: PgSnapshot, earlier: PgSnapshot): boolean {
  return earlier.xmax <= later.xmax && !later.xip.some((x) => visible(x, earlier));
}

/** On a hot standby, whose snapshots list no running xids (docs/architecture.md). */
const finishedPart = (s: PgSnapshot): PgSnapshot => ({ xmin: s.xmin, xmax: s.xmin, xip: [] });

function writeVarint(out: number[], n: bigint): void {
  let v = n;
  do {
    const byte = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v > 0n ? byte | 0x80 : byte);
  } while (v > 0n);
}

class Reader {
  private at = 0;
  constructor(private readonly buf: Buffer) {}

  varint(): bigint {
    let v = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const byte = this.buf[this.at++];
      if (byte === undefined) throw new Error('truncated');
      v |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return v;
    }
    throw new Error('varint too long');
  }

  done(): boolean {
    return this.at === this.buf.length;
  }
}

const hashOf = (label: string, value: string) =>
  createHash('sha256').update(`${label}\0${value}`).digest().subarray(0, HASH_BYTES);

/** Options of an export that change its documents' bytes (export-api.md 4.1, decisions.md D4). */
export interface ChangeOptions {
  excludeCategories: boolean;
  includeContentHtml: boolean;
}

const describe = (o: ChangeOptions) => `excludeCategories=${o.excludeCategories}&includeContentHtml=${o.includeContentHtml}`;

function header(state: ChangeState, opts: ChangeOptions, prefixHash: Buffer, formatHash: Buffer): Buffer {
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
  /** The output format version the ETags carry (decisions.md D9.1). */
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

  /** The `Export-Change-Token` of an export read in `state`. */
  issue(state: ChangeState, opts: ChangeOptions): string {
    const parsed = parseSnapshot(state.snapshot);
    const snap = state.inRecovery ? finishedPart(parsed) : parsed;
    const tail: number[] = [];
    writeVarint(tail, BigInt(Math.floor(state.nowS)));
    writeVarint(tail, snap.xmin);
    writeVarint(tail, snap.xmax - snap.xmin);
    writeVarint(tail, BigInt(snap.xip.length));
    let last = snap.xmin;
    for (const x of snap.xip) {
      writeVarint(tail, x - last);
      last = x;
    }
    const body = Buffer.concat([header(state, opts, this.prefixHash, this.formatHash), Buffer.from(tail)]);
    return Buffer.concat([body, this.mac(body)]).toString('base64url');
  }

  /** Returns the snapshot a delta compares with (`$2` of changes-query.ts); throws the errors above. */
  accept(token: string, state: ChangeState, opts: ChangeOptions): string {
    const raw = token.length <= MAX_TOKEN_CHARS && /^[A-Za-z0-9_-]+$/.test(token) ? Buffer.from(token, 'base64url') : Buffer.alloc(0);
    if (raw.length < FIXED_BYTES + MAC_BYTES || raw[0] !== VERSION) {
      throw new InvalidChangeTokenError('malformed', 'changedSince is not a change token');
    }
    const body = raw.subarray(0, raw.length - MAC_BYTES);
    if (!timingSafeEqual(this.mac(body), raw.subarray(raw.length - MAC_BYTES))) {
      throw new InvalidChangeTokenError('forged', 'changedSince is not a change token this service issued');
    }
    const want = header(state, opts, this.prefixHash, this.formatHash);
    const same = (start: number, bytes: number) => body.subarray(start, start + bytes).equals(want.subarray(start, start + bytes));
    if (!same(AT.book, HASH_BYTES)) throw new InvalidChangeTokenError('other-book', 'changedSince was issued for another knowledge base');
    if (!same(AT.database, HASH_BYTES)) {
      throw new ExpiredChangeTokenError('other-database', 'changedSince was issued by another database (restored or upgraded since)');
    }
    if (!same(AT.epoch, EPOCH_BYTES)) {
      throw new InvalidChangeTokenError('recreated-book', 'changedSince was issued before this knowledge base was deleted and created again');
    }
    if (body[1] !== want[1]) {
      const bits = body[1]!;
      const issued = describe({ excludeCategories: (bits & 1) !== 0, includeContentHtml: (bits & 2) !== 0 });
      throw new InvalidChangeTokenError('other-options', `changedSince was issued for ${issued}, not ${describe(opts)}`);
    }
    if (!same(AT.prefix, HASH_BYTES)) throw new InvalidChangeTokenError('other-prefix', 'changedSince was issued under another media proxy prefix');
    if (!same(AT.format, HASH_BYTES)) {
      throw new ExpiredChangeTokenError('other-format', 'changedSince was issued by a server release with another output format');
    }

    let issuedS: bigint;
    let snap: PgSnapshot;
    try {
      const r = new Reader(body.subarray(FIXED_BYTES));
      issuedS = r.varint();
      const xmin = r.varint();
      const xmax = xmin + r.varint();
      const n = r.varint();
      const xip: bigint[] = [];
      let last = xmin;
      for (let i = 0n; i < n; i++) {
        last += r.varint();
        xip.push(last);
      }
      if (!r.done()) throw new Error('trailing bytes');
      snap = { xmin, xmax, xip };
    } catch {
      // Only a bug of our own makes a genuine token unreadable: it is still not one to honour.
      throw new InvalidChangeTokenError('malformed', 'changedSince is not a change token');
    }

    const ageS = state.nowS - Number(issuedS);
    if (ageS > this.config.retentionDays * 86_400) {
      throw new ExpiredChangeTokenError('expired', `changedSince is older than CHANGE_RETENTION_DAYS (${this.config.retentionDays} days)`);
    }
    if (BigInt(state.tokenFloor) > snap.xmin) {
      throw new ExpiredChangeTokenError('pruned', 'changedSince is older than the removals this service keeps');
    }
    const now = parseSnapshot(state.snapshot);
    const since = state.inRecovery ? finishedPart(snap) : snap;
    if (!follows(state.inRecovery ? finishedPart(now) : now, since)) {
      throw new ExpiredChangeTokenError('ahead', 'changedSince is newer than the data this server reads');
    }
    return formatSnapshot(since);
  }
}

/** Every instance shares it (sql/0006_change_tracking.sql). */
export async function loadChangeTokenSecret(sql: Sql): Promise<Buffer> {
  const [row] = await sql<{ token_secret: Buffer }[]>`SELECT token_secret FROM change_tracking`;
  if (!row) throw new Error('change_tracking has no row: the change token secret is missing (run kb-export migrate)');
  return row.token_secret;
}
