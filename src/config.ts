/**
 * Configuration: the environment, validated once at start-up into one typed object.
 * A bad value throws ConfigError naming the variable, so start-up stops with a message.
 */
import { isIP, isIPv4 } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { normalizeMediaPrefix } from './export/rewrite/media-url.js';

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export interface Config {
  /** Unset: an embedded PostgreSQL whose data lives in dataDir. */
  databaseUrl: string | undefined;
  dataDir: string;
  host: string;
  port: number;
  /** Ends with exactly one '/' (decisions.md D3.1). */
  mediaProxyPrefix: string;
  /** Key verifications per client address per window (decisions.md D5.4). */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  redisUrl: string | undefined;
  /** Passed to Fastify's trustProxy: false, true, a hop count, or addresses/CIDRs. */
  trustProxy: boolean | number | string;
  logLevel: LogLevel;
  /** Most exports that hold a database connection at once; the rest wait for one. */
  exportConcurrency: number;
  /** Connections for key and book lookups, separate from exports so they never starve. */
  poolSize: number;
  /** Bytes of small export bodies kept in memory (src/export/export-cache.ts); 0 turns it off. */
  exportCacheBytes: number;
  /** Rows fetched from the export cursor per batch. */
  exportBatchSize: number;
  /** Worker threads that rewrite contentHtml off the event loop (src/export/rewrite/rewrite-pool.ts); 0: none. */
  rewriteWorkers: number;
  /** Bytes of flagged contentHtml a batch needs before it goes to a rewrite worker. */
  rewriteOffloadBytes: number;
  /** Whether stored rewrite plans are used and written (src/export/rewrite/plan-store.ts, sql/0005). */
  rewritePlans: boolean;
  /** A client that reads nothing for this long is dropped, ending its snapshot (decisions.md D6.4). */
  stallTimeoutMs: number;
  /**
   * Bytes per second a client must accept, averaged over the last stallTimeoutMs while the server
   * has data waiting, or it is dropped (decisions.md D8.3); 0 turns the floor off.
   */
  minDrainBytesPerS: number;
  /** Longest an export's snapshot may stay open, ms (decisions.md D8.3); 0: no limit. */
  exportMaxDurationMs: number;
  /** Exports that may wait for a free export slot (decisions.md D8.1). */
  exportQueueMax: number;
  /** Longest wait for an export slot before 503, ms (decisions.md D8.1). */
  exportQueueTimeoutMs: number;
  /** Exports one user may stream at once (decisions.md D8.2). */
  exportPerUserMax: number;
  /** Longest a rewrite worker may take over one batch before it is replaced, ms (decisions.md D8.6). */
  rewriteTimeoutMs: number;
  /**
   * Longest wait for the database before an answer is due, ms (decisions.md D8.5, D8.7): connecting,
   * each lookup (also its statement_timeout), an export's start and any lock it waits for.
   */
  dbTimeoutMs: number;
  /** How long running exports may take to finish on SIGTERM/SIGINT. */
  shutdownGraceMs: number;
  /**
   * Longest a client may take to send a request's line and headers before 408 REQUEST_TIMEOUT
   * (decisions.md D7.4). Bounds receiving the request only, never the response's stream.
   */
  requestTimeoutMs: number;
  /** When set, /metrics is served on this port (same HOST) instead of the API's (decisions.md D10.3). */
  metricsPort: number | undefined;
  /** On SIGTERM, how long /readyz answers 503 before the server stops taking requests, ms (decisions.md D10.2). */
  shutdownDelayMs: number;
  /** Apply pending migrations when `serve` starts (MIGRATE_ON_START); otherwise only `kb-export migrate` does. */
  migrateOnStart: boolean;
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

function trustProxy(env: Env): boolean | number | string {
  const raw = str(env, 'TRUST_PROXY');
  if (raw === undefined || raw === 'false' || raw === '0') return false;
  if (raw === 'true') return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  // Fastify compiles the list at start-up and throws a bare TypeError on an entry that is not an
  // address, so each entry is checked here: `beef` or `10.0.0.0/99` must name TRUST_PROXY.
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

/** One rewrite worker per core beyond the event loop's, at most 4; none on a single core. */
function defaultRewriteWorkers(): number {
  return Math.max(0, Math.min(4, os.availableParallelism() - 1));
}

/** Reads and validates the environment. Throws ConfigError naming the first bad variable. */
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
  return {
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    dataDir: path.resolve(str(env, 'KB_DATA_DIR') ?? './.data'),
    host,
    port: int(env, 'PORT', 3000, 0, 65535),
    mediaProxyPrefix,
    rateLimitMax: int(env, 'RATE_LIMIT_MAX', 600, 1, 1_000_000_000),
    rateLimitWindowMs: int(env, 'RATE_LIMIT_WINDOW_MS', 60_000, 1, 86_400_000),
    redisUrl: url(env, 'REDIS_URL', ['redis:', 'rediss:']),
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
    shutdownDelayMs: int(env, 'SHUTDOWN_DELAY_MS', 0, 0, 600_000),
    metricsPort: str(env, 'METRICS_PORT') === undefined ? undefined : int(env, 'METRICS_PORT', 0, 0, 65535),
  };
}
