/**
 * The real app (src/app.ts) on a real socket whose two database pools reach PostgreSQL through TCP
 * proxies the test controls (test/helpers/tcp-proxy.ts): the export pool through `exportProxy`, the
 * key and book lookups through `lookupProxy`, so a fault can hit the exports alone or everything.
 */
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import type { Config } from '../../src/config.js';
import { connect, type Sql } from '../../src/db/connect.js';
import { listenOnLoopback, testConfig } from './app.js';
import type { TestDatabase } from './db.js';
import { startTcpProxy, targetOf, type TcpProxy } from './tcp-proxy.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** The export pool's application_name here, as in test/helpers/app.ts. */
export const EXPORT_APP = 'kbx-test-export';

export interface ProxiedServer {
  url: string;
  app: FastifyInstance;
  config: Config;
  /** The export pool (EXPORT_CONCURRENCY connections through exportProxy). */
  exportSql: Sql;
  exportProxy: TcpProxy;
  lookupProxy: TcpProxy;
}

/**
 * Builds and starts the app on `db` with `env` (testConfig, helpers/app.ts), its pools behind two
 * fresh proxies, connect and lookup timeouts from DB_TIMEOUT_MS as src/server.ts sets them.
 */
export async function startProxiedServer(
  t: Teardown,
  db: TestDatabase,
  env: Record<string, string> = {},
): Promise<ProxiedServer> {
  const config = testConfig(db.url, { RATE_LIMIT_MAX: '1000000', ...env });
  const exportProxy = await startTcpProxy(t, targetOf(db.url));
  const lookupProxy = await startTcpProxy(t, targetOf(db.url));
  const connectTimeoutS = Math.max(1, Math.ceil(config.dbTimeoutMs / 1000));
  const sql = connect(lookupProxy.urlFor(db.url), {
    max: 4,
    applicationName: 'kbx-test-lookup',
    connectTimeoutS,
    statementTimeoutMs: config.dbTimeoutMs,
    fetchTypes: false,
  });
  const exportSql = connect(exportProxy.urlFor(db.url), {
    max: config.exportConcurrency,
    applicationName: EXPORT_APP,
    connectTimeoutS,
    fetchTypes: false,
  });
  const app = await buildApp({ config, sql, exportSql, planSql: sql, logger: false });
  const url = await listenOnLoopback(t, app, [sql, exportSql]);
  return { url, app, config, exportSql, exportProxy, lookupProxy };
}
