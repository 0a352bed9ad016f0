/**
 * `kb-export serve` as a process: start-up, the demo on an embedded PostgreSQL, and graceful
 * shutdown (running exports finish, then the pools and the embedded server close).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import t from 'tap';
import { request } from 'undici';
import { cliRuntime } from '../bench/lib/cli-runtime.js';
import { freePort } from '../src/db/free-port.js';
import { createTestDatabase } from './helpers/db.js';
import { seed, seedSizedBook, simpleSeed } from './helpers/app.js';
import { untracked } from '../bench/lib/untracked.js';
import { CLI, ROOT } from './helpers/paths.js';

interface Served {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/**
 * Spawns `serve` with `env` (and nothing of this process's kb-export variables), as production
 * runs it: the shebang sets the runtime flags, and NODE_OPTIONS is `env`'s or none (untracked.ts).
 */
function spawnServe(args: string[], { NODE_OPTIONS = '', ...env }: Record<string, string>): Served {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(DATABASE_URL|KB_|PORT|HOST|LOG_LEVEL|MEDIA_PROXY_PREFIX|REDIS_URL|TRUST_PROXY)/.test(k))
      base[k] = v;
  }
  const [command, argv] = untracked([CLI, 'serve', ...args], NODE_OPTIONS);
  const child = spawn(command, argv, { cwd: ROOT, env: { ...base, PORT: '0', ...env } });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

async function waitFor<T>(what: string, fn: () => T | undefined, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A fresh database where user u1 (key kbx_u1) owns `kb` with `documents` documents of about 8 kB of
 * export each: far more than socket buffers hold, so a client that stops reading holds the export.
 * Written by PostgreSQL; generating realistic documents here cost seconds of CPU for nothing the
 * shutdown tests look at.
 */
async function databaseWithDocuments(t: { teardown(fn: () => unknown): void }, documents: number) {
  const db = await createTestDatabase(t);
  await seedSizedBook(db.sql, 'u1', documents, {
    content_str: `repeat('words of a page ', 250)`,
    content_html: `'<p>' || repeat('words of a page ', 250) || '</p>'`,
  });
  return db;
}

const listening = (s: Served) => () => /listening at (http:\/\/[0-9.]+:\d+)/.exec(s.output())?.[1];

// Each test has a database and server processes of its own, and spends most of its time waiting on them.
t.jobs = 3;

t.before(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
});

t.test(
  'serve changes the schema only when asked: refused when behind, --migrate and MIGRATE_ON_START migrate',
  async (t) => {
    const db = await createTestDatabase(t, { migrate: false });
    const plain = spawnServe([], { DATABASE_URL: db.url });
    t.teardown(() => plain.child.kill('SIGKILL'));
    t.not(await plain.exited, 0, 'a plain serve on an unmigrated database stops');
    t.match(plain.output(), /schema is behind: \d+ migration\(s\) pending .*kb-export migrate/);
    const [none] = await db.sql`SELECT to_regclass('public.documents')::text AS t`;
    t.equal(none!.t, null, 'and leaves the database as it was');

    // The refused start left `db` unmigrated: serve --migrate starts from it; MIGRATE_ON_START from another.
    for (const [how, args, env] of [
      ['serve --migrate', ['--migrate'], {}],
      ['MIGRATE_ON_START=true', [], { MIGRATE_ON_START: 'true' }],
    ] as const) {
      const fresh = how === 'serve --migrate' ? db : await createTestDatabase(t, { migrate: false });
      const s = spawnServe([...args], { DATABASE_URL: fresh.url, ...env });
      t.teardown(() => s.child.kill('SIGKILL'));
      await waitFor('listening', listening(s));
      const [table] = await fresh.sql`SELECT to_regclass('public.documents')::text AS t`;
      t.equal(table!.t, 'documents', `${how} migrated before listening`);
      s.child.kill('SIGTERM');
      t.equal(await s.exited, 0);
    }
  },
);

t.test('a SIGTERM the moment the server says it listens closes it as any other, exit 0', async (t) => {
  const db = await createTestDatabase(t);
  const codes: (number | null)[] = [];
  // Signals sent as the listening line arrives, before serve() returns: five tries, as it is a race.
  for (let i = 0; i < 5; i++) {
    const s = spawnServe([], { DATABASE_URL: db.url });
    t.teardown(() => s.child.kill('SIGKILL'));
    const onLine = () => {
      if (!listening(s)()) return;
      s.child.stdout!.off('data', onLine);
      s.child.kill('SIGTERM');
    };
    s.child.stdout!.on('data', onLine);
    codes.push(await s.exited);
  }
  t.same(codes, [0, 0, 0, 0, 0], 'every one closed and exited 0, none by the signal');
});

t.test('SIGTERM lets a running export finish, then the server exits 0', async (t) => {
  const db = await databaseWithDocuments(t, 3000);
  const s = spawnServe([], {
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    EXPORT_BATCH_SIZE: '20',
    SHUTDOWN_GRACE_MS: '60000',
  });
  t.teardown(() => {
    s.child.kill('SIGKILL');
  });
  const base = await waitFor('listening', listening(s));
  const res = await request(`${base}/api/v1/open/books/kb/docs`, { headers: { authorization: 'Bearer kbx_u1' } });
  t.equal(res.statusCode, 200);
  // Read slowly at first so the export is still running when the signal arrives.
  const chunks: Buffer[] = [];
  let signalled = false;
  for await (const chunk of res.body) {
    chunks.push(chunk as Buffer);
    if (!signalled) {
      s.child.kill('SIGTERM');
      signalled = true;
      await waitFor('the shutdown log line', () => (/closing/.test(s.output()) ? true : undefined), 10_000);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  t.equal(body.meta.count, body.documents.length, 'the export finished after SIGTERM');
  t.ok(body.documents.length > 2000);
  t.equal(await s.exited, 0, 'exit code 0 after a graceful shutdown');
  const after = await request(`${base}/api/v1/open/books/kb/docs`).then(
    () => 'answered',
    () => 'refused',
  );
  t.equal(after, 'refused', 'nothing listens after shutdown');
});

t.test('SIGTERM: /readyz answers 503 first (SHUTDOWN_DELAY_MS), a running export still finishes (D10.2)', async (t) => {
  const db = await databaseWithDocuments(t, 2000);
  const s = spawnServe([], {
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    EXPORT_BATCH_SIZE: '20',
    SHUTDOWN_DELAY_MS: '3000',
    SHUTDOWN_GRACE_MS: '60000',
  });
  t.teardown(() => s.child.kill('SIGKILL'));
  const base = await waitFor('listening', listening(s));
  const readyz = async () => {
    const r = await request(`${base}/readyz`, { reset: true });
    return { status: r.statusCode, body: (await r.body.json()) as { status: string; reason?: string } };
  };
  t.same(await readyz(), { status: 200, body: { status: 'ready' } }, 'ready while serving');
  const res = await request(`${base}/api/v1/open/books/kb/docs`, { headers: { authorization: 'Bearer kbx_u1' } });
  const chunks: Buffer[] = [];
  let signalled = false;
  let during: Awaited<ReturnType<typeof readyz>> | undefined;
  for await (const chunk of res.body) {
    chunks.push(chunk as Buffer);
    if (!signalled) {
      signalled = true;
      s.child.kill('SIGTERM');
      await waitFor('the shutdown log line', () => (/closing/.test(s.output()) ? true : undefined), 10_000);
      during = await readyz();
    }
  }
  t.same(
    during,
    { status: 503, body: { status: 'unavailable', reason: 'shutting down' } },
    'unready as soon as SIGTERM arrives',
  );
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  t.equal(body.meta.count, body.documents.length, 'the export finished');
  t.equal(await s.exited, 0);
});

t.test(
  'serve --demo on an empty embedded database prints a working key and curl, and stops its database',
  async (t) => {
    const dataDir = path.join(os.tmpdir(), `kb-export-demo-test-${randomBytes(4).toString('hex')}`);
    const s = spawnServe(['--demo'], { KB_DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
    t.teardown(async () => {
      s.child.kill('SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    });
    const curl = await waitFor('the curl line', () => /^curl .*$/m.exec(s.output())?.[0], 120_000);
    const [, key, url] = /Bearer ([^']+)' '([^']+)'/.exec(curl)!;
    t.match(key, /^kbx_/, 'decisions.md D5.1: a recognisable prefix');
    const res = await request(url!, { headers: { authorization: `Bearer ${key}` } });
    t.equal(res.statusCode, 200);
    const body = (await res.body.json()) as { meta: { count: number }; documents: { contentHtml: string | null }[] };
    t.ok(body.meta.count > 1000, 'the demo knowledge base has thousands of documents');
    t.equal(body.meta.count, body.documents.length);
    // The demo serves the media its documents reference, under the prefix (src/generate/demo-media.ts).
    const image = body.documents
      .map((d) => /<img src="(\/media\/[^"?]+\.png)"/.exec(d.contentHtml ?? '')?.[1])
      .find((u) => u !== undefined)!;
    const media = await request(new URL(image, url).href);
    t.equal(media.statusCode, 200, `${image} is served`);
    t.equal(media.headers['content-type'], 'image/png');
    t.ok(
      Buffer.from(await media.body.arrayBuffer())
        .subarray(1, 4)
        .equals(Buffer.from('PNG')),
      'a PNG',
    );
    t.match(
      s.output(),
      /npx kb-export backup --server http:\/\/\S+ --book demo --out demo\.json --media-dir media\//,
      'the banner shows a backup with its media',
    );
    t.match(
      s.output(),
      /DATABASE_URL is not set: using an embedded PostgreSQL in .*for development only/,
      'says the database is embedded',
    );
    const pid = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    s.child.kill('SIGINT');
    t.equal(await s.exited, 0);
    const alive = (() => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    })();
    t.notOk(alive, 'the embedded PostgreSQL stopped with the server');
  },
);

// One plain serve covers the checks that need nothing but a server on a migrated database: each
// start costs a Node.js process and a database. The SIGTERM that ends it is the last check.
t.test('a plain serve on a migrated database', async (t) => {
  const db = await createTestDatabase(t);
  // For the pruning: a removal, and as if a horizon had been sampled 31 days ago, just after it.
  await seed(db.sql, simpleSeed([{ id: 'd1', slug: 'd1', name: 'D1', type: 'document', orderKey: 'a', status: 1 }]));
  const removedBy = await db.sql.begin(async (tx) => {
    await tx`DELETE FROM documents WHERE id = 'd1'`;
    return (await tx<{ x: string }[]>`SELECT pg_current_xact_id()::text AS x`)[0]!.x;
  });
  await db.sql`INSERT INTO change_horizons (taken_at, snapshot_xmin) VALUES (now() - interval '31 days', (${removedBy}::numeric + 1)::text::xid8)`;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kbx-imports-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const log = path.join(dir, 'imports.log');
  const hooks = path.join(ROOT, 'test/helpers/record-imports.mjs');
  const metricsPort = await freePort();
  const s = spawnServe([], {
    DATABASE_URL: db.url,
    LOG_LEVEL: 'info',
    CHANGE_RETENTION_DAYS: '30',
    METRICS_PORT: String(metricsPort),
    SHUTDOWN_GRACE_MS: '20000',
    KB_IMPORT_LOG: log,
    NODE_OPTIONS: `--import=${hooks}`,
  });
  t.teardown(() => s.child.kill('SIGKILL'));
  const base = await waitFor('listening', listening(s));

  await t.test('a plain serve never loads the data generator (only --demo does)', async (t) => {
    const loaded = readFileSync(log, 'utf8').split('\n');
    t.ok(
      loaded.some((u) => u.endsWith('/dist/src/server.js')),
      'the log records what serve loaded',
    );
    t.notOk(
      loaded.some((u) => /\/src\/generate\//.test(u)),
      'nothing under src/generate/',
    );
    const media = await request(`${base}/media/uploads/x.png`);
    t.equal(media.statusCode, 404, 'nor serves the demo media');
    await media.body.dump();
  });

  await t.test('serve prunes the removals kept for deltas past CHANGE_RETENTION_DAYS (D12.4)', async (t) => {
    await waitFor('the pruning log line', () =>
      /"deleted":1.*removals older than CHANGE_RETENTION_DAYS pruned/.test(s.output()) ? true : undefined,
    );
    t.same(await db.sql`SELECT document_id FROM document_removals`, [], 'the removal is gone');
  });

  await t.test('METRICS_PORT: /metrics on a listener of its own, not on the API port (D10.3)', async (t) => {
    const scrape = await request(`http://127.0.0.1:${metricsPort}/metrics`);
    t.equal(scrape.statusCode, 200);
    t.match(await scrape.body.text(), /^# HELP kb_export_/m, 'the exposition');
    const other = await request(`http://127.0.0.1:${metricsPort}/livez`);
    t.equal(other.statusCode, 404, 'nothing else there');
    await other.body.dump();
    const onApi = await request(`${base}/metrics`);
    t.equal(onApi.statusCode, 404, 'not on the API port');
    await onApi.body.dump();
  });

  await t.test(
    'every way of starting the server runs the executable, so the runtime settings of its shebang apply',
    async (t) => {
      const runtime = cliRuntime(CLI);
      t.ok(
        runtime.nodeFlags.includes('--max-semi-space-size=2') &&
          runtime.nodeFlags.includes('--heap-growing-percent=100'),
        'the V8 flags',
      );
      t.same(runtime.env, { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '131072' }, 'the glibc settings');
      t.ok(statSync(CLI).mode & 0o100, 'the build leaves dist/src/cli/kb-export.js executable');
      const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
        scripts: Record<string, string>;
      };
      t.match(pkg.scripts.start, /&& dist\/src\/cli\/kb-export\.js serve/, 'npm start runs the executable');
      const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
      t.ok(
        dockerfile.split('\n').includes('CMD ["dist/src/cli/kb-export.js", "serve"]'),
        'the Docker image runs the executable',
      );

      const argv = readFileSync(`/proc/${s.child.pid}/cmdline`, 'utf8').split('\0');
      for (const flag of runtime.nodeFlags) t.ok(argv.includes(flag), `the running server has ${flag}`);
      const environ = readFileSync(`/proc/${s.child.pid}/environ`, 'utf8').split('\0');
      for (const [k, v] of Object.entries(runtime.env))
        t.ok(environ.includes(`${k}=${v}`), `the running server has ${k}=${v}`);
    },
  );

  await t.test('a port already in use stops start-up with a message and a non-zero exit', async (t) => {
    const port = new URL(base).port;
    const second = spawnServe([], { DATABASE_URL: db.url, PORT: port, LOG_LEVEL: 'silent' });
    t.teardown(() => second.child.kill('SIGKILL'));
    t.not(await second.exited, 0);
    t.match(second.output(), /EADDRINUSE|address already in use/);
    t.notMatch(second.output(), /\n\s+at .+[:(]/, 'no stack trace');
  });

  await t.test('SIGTERM does not wait for a connection that never sent a request', async (t) => {
    const api = new URL(base);
    // A client's spare keep-alive connection (a browser's preconnect does the same).
    const silent = connect(Number(api.port), api.hostname);
    silent.on('error', () => {});
    await new Promise((r) => silent.once('connect', r));
    const t0 = Date.now();
    s.child.kill('SIGTERM');
    t.equal(await s.exited, 0, 'exit code 0');
    t.ok(Date.now() - t0 < 10_000, `exited in ${Date.now() - t0} ms, not at the end of the 20 s grace period`);
    silent.destroy();
    t.match(s.output(), /closing: running exports may finish/, 'the graceful shutdown ran');
    const refused = (url: string) =>
      request(url).then(
        () => 'answered',
        () => 'refused',
      );
    t.equal(
      await refused(`http://127.0.0.1:${metricsPort}/metrics`),
      'refused',
      'the metrics listener closes with the server',
    );
    t.equal(await refused(`${base}/livez`), 'refused', 'nothing listens on the API port after shutdown');
    const loaded = readFileSync(log, 'utf8').split('\n');
    t.notOk(
      loaded.some((u) => /\/src\/generate\//.test(u)),
      'nothing under src/generate/ was loaded in its whole life, shutdown included',
    );
  });
});
