/**
 * loadConfig: defaults, normalisation, and a ConfigError naming the variable for each bad value.
 */
import { ConfigError } from '../src/errors.js';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { loadConfig } from '../src/config.js';

t.test('defaults', async (t) => {
  const c = loadConfig({});
  t.equal(c.host, '127.0.0.1');
  t.equal(c.port, 3000);
  t.equal(c.mediaProxyPrefix, '/media/');
  t.equal(c.databaseUrl, undefined);
  t.equal(c.redisUrl, undefined);
  t.equal(c.redisKeyPrefix, 'kb-export', 'the Redis keys of earlier releases');
  t.equal(c.trustProxy, false);
  t.equal(c.logLevel, 'info');
  t.equal(c.dataDir, path.resolve('./.data'));
  t.equal(c.rateLimitMax, 600);
  t.equal(c.rateLimitWindowMs, 60_000);
  t.equal(c.stallTimeoutMs, 60_000);
  t.ok(c.exportConcurrency >= 1 && c.poolSize >= 1 && c.exportBatchSize >= 1);
  t.equal(
    c.rewriteWorkers,
    Math.max(0, Math.min(4, os.availableParallelism() - 1)),
    'one per core beyond the first, at most 4',
  );
  t.equal(c.rewriteOffloadBytes, 65_536);
  t.equal(c.requestTimeoutMs, 10_000, 'D7.4: a request is cut within seconds');
  t.equal(c.changeRetentionDays, 30, 'D12.4: change tokens and removals are kept 30 days');
});

t.test(
  'rewrite workers: one per core beyond the event loop, at most 4; REWRITE_WORKERS=0 turns them off',
  async (t) => {
    const n = loadConfig({}).rewriteWorkers;
    t.ok(n >= 0 && n <= 4);
    t.equal(n, Math.max(0, Math.min(4, os.availableParallelism() - 1)), 'none on a single core');
    t.equal(loadConfig({ REWRITE_WORKERS: '0' }).rewriteWorkers, 0);
    t.equal(loadConfig({ REWRITE_WORKERS: '3', REWRITE_OFFLOAD_BYTES: '0' }).rewriteWorkers, 3);
    t.equal(loadConfig({ REWRITE_OFFLOAD_BYTES: '0' }).rewriteOffloadBytes, 0);
  },
);

t.test('empty or blank values mean unset', async (t) => {
  const c = loadConfig({ PORT: '', HOST: '  ', MEDIA_PROXY_PREFIX: '', DATABASE_URL: ' ', LOG_LEVEL: '' });
  t.equal(c.port, 3000);
  t.equal(c.host, '127.0.0.1');
  t.equal(c.mediaProxyPrefix, '/media/');
  t.equal(c.databaseUrl, undefined);
  t.equal(c.logLevel, 'info');
});

t.test('MEDIA_PROXY_PREFIX ends with exactly one slash (D3.1)', async (t) => {
  const cases: [string, string][] = [
    ['/media', '/media/'],
    ['/media/', '/media/'],
    ['/m//', '/m/'],
    ['/m///', '/m/'],
    ['https://cdn.example.com/p', 'https://cdn.example.com/p/'],
    [' /media ', '/media/'],
  ];
  for (const [raw, want] of cases)
    t.equal(loadConfig({ MEDIA_PROXY_PREFIX: raw }).mediaProxyPrefix, want, JSON.stringify(raw));
});

t.test('good values are read', async (t) => {
  const c = loadConfig({
    HOST: '0.0.0.0',
    PORT: '8080',
    DATABASE_URL: 'postgresql://u:p@db:5432/kb',
    REDIS_URL: 'rediss://cache:6380',
    REDIS_KEY_PREFIX: 'kb-export:staging',
    LOG_LEVEL: 'silent',
    RATE_LIMIT_MAX: '1',
    STALL_TIMEOUT_MS: '100',
    REQUEST_TIMEOUT_MS: '2500',
    CHANGE_RETENTION_DAYS: '7',
  });
  t.match(c, {
    host: '0.0.0.0',
    port: 8080,
    databaseUrl: 'postgresql://u:p@db:5432/kb',
    redisUrl: 'rediss://cache:6380',
    redisKeyPrefix: 'kb-export:staging',
    logLevel: 'silent',
    rateLimitMax: 1,
    stallTimeoutMs: 100,
    requestTimeoutMs: 2500,
    changeRetentionDays: 7,
  });
  t.equal(loadConfig({}).migrateOnStart, false, 'serve migrates only when asked');
  for (const [raw, want] of [
    ['true', true],
    ['1', true],
    ['false', false],
    ['0', false],
  ] as const) {
    t.equal(loadConfig({ MIGRATE_ON_START: raw }).migrateOnStart, want, `MIGRATE_ON_START=${raw}`);
  }
  t.equal(loadConfig({ PORT: '0' }).port, 0);
  t.equal(loadConfig({ PORT: '65535' }).port, 65535);
  const proxies: [string, boolean | number | string][] = [
    ['true', true],
    ['false', false],
    ['0', false],
    ['2', 2],
    ['10.0.0.1', '10.0.0.1'],
    ['10.0.0.0/8, 192.168.1.1', '10.0.0.0/8, 192.168.1.1'],
    ['::1,fd00::/8', '::1,fd00::/8'],
    ['10.0.0.0/255.0.0.0', '10.0.0.0/255.0.0.0'],
  ];
  for (const [raw, want] of proxies) t.equal(loadConfig({ TRUST_PROXY: raw }).trustProxy, want, `TRUST_PROXY=${raw}`);
});

t.test('each bad value throws ConfigError naming the variable', async (t) => {
  const cases: [string, string][] = [
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['DATABASE_URL', 'mysql://x'],
    ['DATABASE_URL', 'not a url'],
    ['DATABASE_URL', 'postgres://'],
    ['DATABASE_URL', 'postgres://u@h1:5432,,h2/db'],
    ['DATABASE_URL', 'postgres://u@h1:5432,h2:99999/db'],
    ['DATABASE_URL', 'postgres://u@h1,[::1]:5432/db'],
    ['DATABASE_URL', 'postgres://u@h1 x,h2/db'],
    ['DATABASE_URL', 'postgres://u:p@ss@h1/db'],
    ['DATABASE_URL', 'postgres://u@h1,h2/db?target_session_attrs=any'],
    ['REPLICA_MAX_LAG_MS', '-1'],
    ['REPLICA_CHECK_INTERVAL_MS', '50'],
    ['REDIS_URL', 'http://x'],
    ['REDIS_KEY_PREFIX', 'kb/export'],
    ['REDIS_KEY_PREFIX', 'a b'],
    ['REDIS_KEY_PREFIX', 'x'.repeat(65)],
    ['LOG_LEVEL', 'loud'],
    ['RATE_LIMIT_MAX', '0'],
    ['RATE_LIMIT_MAX', 'many'],
    ['TRUST_PROXY', 'maybe'],
    // Not addresses although made of hex digits: Fastify would throw a bare TypeError at start-up.
    ['TRUST_PROXY', 'beef'],
    ['TRUST_PROXY', '10.0.0.0/99'],
    ['TRUST_PROXY', '10.0.0.1,'],
    ['MEDIA_PROXY_PREFIX', '/me dia/'],
    ['MEDIA_PROXY_PREFIX', '/m"x/'],
    ['STALL_TIMEOUT_MS', '-1'],
    ['STALL_TIMEOUT_MS', '5'],
    ['HOST', 'a b'],
    ['REWRITE_WORKERS', '65'],
    ['REWRITE_WORKERS', 'two'],
    ['REWRITE_OFFLOAD_BYTES', '-5'],
    ['REQUEST_TIMEOUT_MS', '0'],
    ['REQUEST_TIMEOUT_MS', '99'],
    ['REQUEST_TIMEOUT_MS', '600001'],
    ['MIGRATE_ON_START', 'yes'],
    ['CHANGE_RETENTION_DAYS', '0'],
    ['CHANGE_RETENTION_DAYS', '3651'],
    ['CHANGE_RETENTION_DAYS', '1.5'],
  ];
  for (const [name, value] of cases) {
    let error: unknown;
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      error = err;
    }
    t.type(error, ConfigError, `${name}=${value} throws ConfigError`);
    t.equal((error as ConfigError | undefined)?.variable, name, `${name}=${value}: variable`);
    t.match((error as Error | undefined)?.message, new RegExp(`^${name}\\b`), `${name}=${value}: message names it`);
  }
});

t.test('the first bad variable is reported even when others are good', async (t) => {
  t.throws(() => loadConfig({ HOST: '0.0.0.0', PORT: 'abc', LOG_LEVEL: 'debug' }), {
    name: 'ConfigError',
    variable: 'PORT',
  });
});

t.test('D11.6: a multi-host DATABASE_URL is read as postgres.js reads it', async (t) => {
  const good = [
    'postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write',
    'postgresql://u:p%40ss@db-a,db-b.internal:6432/kb?target_session_attrs=primary&sslmode=require',
    'postgres://u@10.0.0.1:5432,10.0.0.2:5432/db',
    'postgres://u:p@[::1]:5432/db',
  ];
  for (const url of good) t.equal(loadConfig({ DATABASE_URL: url }).databaseUrl, url, url);
  const err = (() => {
    try {
      loadConfig({ DATABASE_URL: 'postgres://u@h1,[::1]:5432/db' });
    } catch (e) {
      return e as Error;
    }
    return undefined;
  })();
  t.match(
    err?.message,
    /^DATABASE_URL: has a bad host "\[::1\]:5432" in its host list: IPv6/,
    'says which host and why',
  );
});

t.test('D11.2: DATABASE_REPLICA_URL is one standby or a comma-separated list, and needs DATABASE_URL', async (t) => {
  const primary = 'postgres://u:p@primary:5432/kb';
  t.same(loadConfig({}).databaseReplicaUrls, []);
  t.same(
    loadConfig({ DATABASE_URL: primary, DATABASE_REPLICA_URL: 'postgres://u:p@standby:5432/kb' }).databaseReplicaUrls,
    ['postgres://u:p@standby:5432/kb'],
  );
  t.same(
    loadConfig({
      DATABASE_URL: primary,
      DATABASE_REPLICA_URL:
        'postgres://u:p@s1:5432/kb, postgresql://u:p@s2:5432,s3:5432/kb?target_session_attrs=standby',
    }).databaseReplicaUrls,
    ['postgres://u:p@s1:5432/kb', 'postgresql://u:p@s2:5432,s3:5432/kb?target_session_attrs=standby'],
    'a comma starts a new URL only before postgres://, so each may list hosts',
  );
  t.throws(
    () => loadConfig({ DATABASE_REPLICA_URL: 'postgres://u@s1/kb' }),
    { name: 'ConfigError', variable: 'DATABASE_REPLICA_URL' },
    'no DATABASE_URL',
  );
  t.throws(() => loadConfig({ DATABASE_URL: primary, DATABASE_REPLICA_URL: 'postgres://u@s1/kb,redis://x' }), {
    name: 'ConfigError',
    variable: 'DATABASE_REPLICA_URL',
  });
  t.throws(() => loadConfig({ DATABASE_URL: primary, DATABASE_REPLICA_URL: 'mysql://s1/kb' }), {
    name: 'ConfigError',
    variable: 'DATABASE_REPLICA_URL',
  });
  const c = loadConfig({});
  t.equal(c.replicaMaxLagMs, 5000);
  t.equal(c.replicaCheckIntervalMs, 1000);
  t.equal(loadConfig({ REPLICA_MAX_LAG_MS: '250', REPLICA_CHECK_INTERVAL_MS: '200' }).replicaMaxLagMs, 250);
});
