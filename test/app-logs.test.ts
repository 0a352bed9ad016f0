/**
 * Logs are fastify's pino JSON, and neither keys nor Authorization headers ever appear in them,
 * whatever the outcome of the request.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import { request } from 'undici';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { connect } from '../src/db/connect.js';
import { createTestDatabase } from './helpers/db.js';
import { seed, simpleSeed, doc } from './helpers/app.js';

t.test('keys and Authorization headers never reach the logs', async (t) => {
  const db = await createTestDatabase(t);
  await seed(db.sql, simpleSeed([doc('d1', 'a0')]));
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  const config = loadConfig({ DATABASE_URL: db.url, RATE_LIMIT_MAX: '3', LOG_LEVEL: 'trace' });
  const exportSql = connect(db.url, { max: 2, applicationName: 'kbx-test-export' });
  const app = await buildApp({ config, sql: db.sql, exportSql, planSql: db.sql, logger: stream });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    await exportSql.end({ timeout: 1 });
  });
  const addr = app.server.address();
  const base = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  const secrets = ['kbx_u1', 'kbx_not-a-real-key-0123456789'];
  for (const path of ['/api/v1/open/books/kb/docs', '/api/v1/open/books/nope/docs', '/nowhere']) {
    for (const key of secrets) {
      const res = await request(base + path, { headers: { authorization: `Bearer ${key}` } });
      await res.body.text();
    }
  }
  const text = lines.join('');
  t.ok(lines.length > 5, 'requests were logged');
  for (const line of lines) t.doesNotThrow(() => JSON.parse(line), 'every log line is JSON');
  t.match(text, /"statusCode":200/);
  t.match(text, /"statusCode":429/, 'rate-limited requests are logged too');
  for (const key of secrets) t.notOk(text.includes(key), `the key ${key} is not in the logs`);
  t.notMatch(text, /bearer/i, 'no Authorization header value is in the logs');
});
