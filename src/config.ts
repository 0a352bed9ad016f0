/** The environment, validated once at start-up; a bad value throws ConfigError naming the variable. */
import { isIP, isIPv4 } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ConfigError } from './errors.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** One field per variable of README's configuration table; times in ms, sizes in bytes. */
export interface Config {
  /** Unset: an embedded PostgreSQL in dataDir. May list hosts to follow a failover (D11.6). */
  databaseUrl: string | undefined;
  databaseReplicaUrls: string[];
  replicaMaxLagMs: number;
  replicaCheckIntervalMs: number;
  dataDir: string;
  host: string;
  port: number;
  /** Ends with exactly one '/' (D3.1). */
  mediaProxyPrefix: string;
  /** Key verifications per client address per window (D5.4). */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  redisUrl: string | undefined;
  /** Start of every key kb-export writes to Redis: instances with the same prefix are one fleet (D11.1). */
  redisKeyPrefix: string;
  trustProxy: boolean | number | string;
  logLevel: LogLevel;
  exportConcurrency: number;
  poolSize: number;
  exportCacheBytes: number;
  exportBatchSize: number;
  rewriteWorkers: number;
  rewriteOffloadBytes: number;
  rewritePlans: boolean;
  stallTimeoutMs: number;
  minDrainBytesPerS: number;
  exportMaxDurationMs: number;
  exportQueueMax: number;
  exportQueueTimeoutMs: number;
  exportPerUserMax: number;
  rewriteTimeoutMs: number;
  /** Every wait for the database before an answer is due, lookups' statement_timeout too (D8.5, D8.7). */
  dbTimeoutMs: number;
  shutdownGraceMs: number;
  /** Bounds receiving a request's line and headers, never the response (D7.4). */
  requestTimeoutMs: number;
  metricsPort: number | undefined;
  shutdownDelayMs: number;
  migrateOnStart: boolean;
  maxEventLoopDelayMs: number;
  maxHeapUsedBytes: number;
  changeRetentionDays: number;
}

const FORBIDDEN_PREFIX_CHARS = /[\s"'<>&`]/;

/** Ends it with one `/` (D3.1); throws on an empty prefix or one that could leave an HTML attribute. */
export function normalizeMediaPrefix(p: string): string {
  if (p.length === 0) throw new Error('media proxy prefix must not be empty');
  if (FORBIDDEN_PREFIX_CHARS.test(p)) {
    throw new Error(`media proxy prefix contains a forbidden character: ${JSON.stringify(p)}`);
  }
  let end = p.length;
  while (end > 0 && p.charCodeAt(end - 1) === 0x2f /* / */) end--;
  return p.slice(0, end) + '/';
}

type Env = Record<string, string | undefined>;

function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function int(env: Env, name: string, def: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === undefined) return def;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

function bool(env: Env, name: string, def: boolean): boolean {
  const raw = str(env, name);
  if (raw === undefined) return def;
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError(name, `must be true, false, 1 or 0, got "${raw}"`);
}

function url(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = str(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, 'is not a valid URL');
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must start with ${protocols.map((p) => `${p}//`).join(' or ')}`);
  }
  return raw;
}

const SESSION_ATTRS = ['read-write', 'read-only', 'primary', 'standby', 'prefer-standby'];

/** As postgres.js reads it: WHATWG URL refuses a host list, so the rest is parsed with the first host. */
function postgresUrl(name: string, raw: string): string {
  const scheme = /^postgres(ql)?:\/\//.exec(raw);
  if (!scheme) throw new ConfigError(name, 'must start with postgres:// or postgresql://');
  const authority = raw.slice(scheme[0].length).split(/[/?#]/)[0]!;
  const at = authority.lastIndexOf('@');
  if (authority.indexOf('@') !== at)
    throw new ConfigError(name, 'an @ in the user name or password must be written %40');
  const hostList = authority.slice(at + 1);
  const hosts = hostList.split(',');
  if (hosts.length > 1) {
    for (const host of hosts) {
      const m = /^([A-Za-z0-9._-]+)(?::(\d{1,5}))?$/.exec(host);
      if (!m) {
        const why = host.startsWith('[')
          ? 'IPv6 addresses cannot be listed (postgres.js splits hosts at ":")'
          : 'each must be host or host:port';
        throw new ConfigError(name, `has a bad host "${host}" in its host list: ${why}`);
      }
      if (m[2] !== undefined && (Number(m[2]) < 1 || Number(m[2]) > 65535)) {
        throw new ConfigError(name, `has a bad port in "${host}": must be between 1 and 65535`);
      }
    }
  }
  let parsed: URL;
  try {
    const start = scheme[0].length + at + 1;
    parsed = new URL(raw.slice(0, start) + hosts[0] + raw.slice(start + hostList.length));
  } catch {
    throw new ConfigError(name, 'is not a valid URL');
  }
  if (parsed.hostname === '') throw new ConfigError(name, 'names no host');
  const attrs = parsed.searchParams.get('target_session_attrs');
  if (attrs !== null && !SESSION_ATTRS.includes(attrs)) {
    throw new ConfigError(name, `target_session_attrs must be one of ${SESSION_ATTRS.join(', ')}, got "${attrs}"`);
  }
  return raw;
}

/** A comma starts a new URL only before `postgres://`, so each URL may itself list hosts. */
function replicaUrls(env: Env, databaseUrl: string | undefined): string[] {
  const name = 'DATABASE_REPLICA_URL';
  const raw = str(env, name);
  if (raw === undefined) return [];
  if (databaseUrl === undefined)
    throw new ConfigError(name, 'needs DATABASE_URL: a standby replicates the primary kb-export connects to');
  const urls = raw.split(/,(?=\s*postgres(?:ql)?:\/\/)/).map((u) => u.trim());
  for (const u of urls) {
    if (/,\s*[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(u))
      throw new ConfigError(name, 'each URL of the list must start with postgres:// or postgresql://');
  }
  return urls.map((u) => postgresUrl(name, u));
}

function trustProxy(env: Env): boolean | number | string {
  const raw = str(env, 'TRUST_PROXY');
  if (raw === undefined || raw === 'false' || raw === '0') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  // Fastify throws a bare TypeError on a bad entry (`beef`, `10.0.0.0/99`): the error must name TRUST_PROXY.
  if (raw.split(',').every((entry) => isAddressOrCidr(entry.trim()))) return raw;
  throw new ConfigError('TRUST_PROXY', 'must be true, false, a hop count, or comma-separated addresses/CIDRs');
}

/** `1.2.3.4`, `::1`, `10.0.0.0/8`, `fd00::/8` or `10.0.0.0/255.0.0.0`. */
function isAddressOrCidr(entry: string): boolean {
  const [address = '', range, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (range === undefined) return true;
  if (/^\d{1,3}$/.test(range)) return Number(range) <= (family === 4 ? 32 : 128);
  return family === 4 && isIPv4(range);
}

function defaultRewriteWorkers(): number {
  return Math.max(0, Math.min(4, os.availableParallelism() - 1));
}

/** Throws ConfigError naming the first bad variable. */
export function loadConfig(env: Env = process.env): Config {
  let mediaProxyPrefix: string;
  try {
    mediaProxyPrefix = normalizeMediaPrefix(str(env, 'MEDIA_PROXY_PREFIX') ?? '/media/');
  } catch (err) {
    throw new ConfigError('MEDIA_PROXY_PREFIX', (err as Error).message);
  }
  const logLevel = (str(env, 'LOG_LEVEL') ?? 'info') as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`);
  }
  const host = str(env, 'HOST') ?? '127.0.0.1';
  if (!/^[A-Za-z0-9.:\-[\]]+$/.test(host)) throw new ConfigError('HOST', `is not a host name or address: "${host}"`);
  const redisKeyPrefix = str(env, 'REDIS_KEY_PREFIX') ?? 'kb-export';
  if (!/^[A-Za-z0-9._:-]{1,64}$/.test(redisKeyPrefix)) {
    throw new ConfigError(
      'REDIS_KEY_PREFIX',
      `must be 1-64 letters, digits, '.', '_', ':' or '-', got "${redisKeyPrefix}"`,
    );
  }
  const databaseUrlRaw = str(env, 'DATABASE_URL');
  const databaseUrl = databaseUrlRaw === undefined ? undefined : postgresUrl('DATABASE_URL', databaseUrlRaw);
  return {
    databaseUrl,
    databaseReplicaUrls: replicaUrls(env, databaseUrl),
    replicaMaxLagMs: int(env, 'REPLICA_MAX_LAG_MS', 5000, 0, 3_600_000),
    replicaCheckIntervalMs: int(env, 'REPLICA_CHECK_INTERVAL_MS', 1000, 100, 60_000),
    dataDir: path.resolve(str(env, 'KB_DATA_DIR') ?? './.data'),
    host,
    port: int(env, 'PORT', 3000, 0, 65535),
    mediaProxyPrefix,
    rateLimitMax: int(env, 'RATE_LIMIT_MAX', 600, 1, 1_000_000_000),
    rateLimitWindowMs: int(env, 'RATE_LIMIT_WINDOW_MS', 60_000, 1, 86_400_000),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
    redisKeyPrefix,
    trustProxy: trustProxy(env),
    logLevel,
    exportConcurrency: int(env, 'EXPORT_CONCURRENCY', 8, 1, 1000),
    poolSize: int(env, 'DB_POOL_SIZE', 10, 1, 1000),
    exportBatchSize: int(env, 'EXPORT_BATCH_SIZE', 1000, 1, 100_000),
    exportCacheBytes: int(env, 'EXPORT_CACHE_BYTES', 16 * 1024 * 1024, 0, 1024 * 1024 * 1024),
    rewriteWorkers: int(env, 'REWRITE_WORKERS', defaultRewriteWorkers(), 0, 64),
    rewriteOffloadBytes: int(env, 'REWRITE_OFFLOAD_BYTES', 64 * 1024, 0, 1024 * 1024 * 1024),
    rewritePlans: bool(env, 'REWRITE_PLANS', true),
    stallTimeoutMs: int(env, 'STALL_TIMEOUT_MS', 60_000, 100, 86_400_000),
    minDrainBytesPerS: int(env, 'MIN_DRAIN_BYTES_PER_S', 16 * 1024, 0, 1024 * 1024 * 1024),
    exportMaxDurationMs: int(env, 'EXPORT_MAX_DURATION_MS', 3_600_000, 0, 7 * 86_400_000),
    exportQueueMax: int(env, 'EXPORT_QUEUE_MAX', 32, 0, 100_000),
    exportQueueTimeoutMs: int(env, 'EXPORT_QUEUE_TIMEOUT_MS', 30_000, 1, 3_600_000),
    exportPerUserMax: int(env, 'EXPORT_PER_USER_MAX', 4, 1, 1000),
    rewriteTimeoutMs: int(env, 'REWRITE_TIMEOUT_MS', 30_000, 100, 3_600_000),
    dbTimeoutMs: int(env, 'DB_TIMEOUT_MS', 5000, 100, 600_000),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 30_000, 0, 3_600_000),
    requestTimeoutMs: int(env, 'REQUEST_TIMEOUT_MS', 10_000, 100, 600_000),
    migrateOnStart: bool(env, 'MIGRATE_ON_START', false),
    maxEventLoopDelayMs: int(env, 'MAX_EVENT_LOOP_DELAY_MS', 1000, 0, 600_000),
    maxHeapUsedBytes: int(env, 'MAX_HEAP_USED_BYTES', 512 * 1024 * 1024, 0, 2 ** 46),
    changeRetentionDays: int(env, 'CHANGE_RETENTION_DAYS', 30, 1, 3650),
    shutdownDelayMs: int(env, 'SHUTDOWN_DELAY_MS', 0, 0, 600_000),
    metricsPort: str(env, 'METRICS_PORT') === undefined ? undefined : int(env, 'METRICS_PORT', 0, 0, 65535),
  };
}
