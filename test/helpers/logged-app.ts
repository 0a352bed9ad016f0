/**
 * The real app (src/app.ts) on a real socket with its pino log lines kept for assertions, its
 * export pool counting the snapshots it begins, and pools the test chooses (a database that is
 * down, for instance).
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import type { Config } from '../../src/config.js';
import { connect, type Sql } from '../../src/db/connect.js';
import { listenOnLoopback, testConfig } from './app.js';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface LoggedServer {
  url: string;
  app: FastifyInstance;
  config: Config;
  /** Parsed log lines, in order. */
  logs: Array<Record<string, unknown>>;
  /** Snapshots the export pool began (sql.begin calls). */
  begun(): number;
}

/**
 * Starts the app with `env` on `databaseUrl` (the lookup pool and the export pool both; pass
 * `exportUrl` to give exports another address). LOG_LEVEL is debug unless set; the rest of the
 * config is testConfig's (helpers/app.ts).
 */
export async function startLoggedServer(
  t: Teardown,
  databaseUrl: string,
  env: Record<string, string> = {},
  exportUrl = databaseUrl,
): Promise<LoggedServer> {
  const config = testConfig(databaseUrl, { LOG_LEVEL: 'debug', ...env });
  const logs: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const line of String(chunk).split('\n'))
        if (line.trim() !== '') logs.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  const connectTimeoutS = Math.max(1, Math.ceil(config.dbTimeoutMs / 1000));
  const sql = connect(databaseUrl, {
    max: 4,
    applicationName: 'kbx-test',
    connectTimeoutS,
    statementTimeoutMs: config.dbTimeoutMs,
    fetchTypes: false,
  });
  const exportSql = connect(exportUrl, {
    max: config.exportConcurrency,
    applicationName: 'kbx-test-export',
    connectTimeoutS,
    fetchTypes: false,
  });
  let begun = 0;
  const counting = new Proxy(exportSql, {
    get(target, prop, receiver) {
      if (prop === 'begin') {
        return (...args: unknown[]) => {
          begun++;
          return (target.begin as (...a: unknown[]) => unknown)(...args);
        };
      }
      return Reflect.get(target, prop, receiver) as unknown;
    },
  }) as Sql;
  const app = await buildApp({ config, sql, exportSql: counting, planSql: sql, logger: stream });
  const url = await listenOnLoopback(t, app, [sql, exportSql]);
  return { url, app, config, logs, begun: () => begun };
}
