/**
 * docker-compose.yml and the files it mounts (deploy/), checked without a container engine: the
 * YAML parses, the fleet of decisions.md D11 is there (a standby made with pg_basebackup -R, Redis,
 * two instances, a load balancer that asks /readyz), and the instances' environment passes
 * loadConfig with a multi-host DATABASE_URL, DATABASE_REPLICA_URL and REDIS_URL.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { loadConfig } from '../src/config.js';
import { ROOT } from './helpers/paths.js';

interface Service {
  image?: string;
  build?: string;
  command?: string | string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }> | string[];
}

const compose = parse(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, Service>;
};
const services = compose.services;
const instances = Object.keys(services).filter((name) => name.startsWith('export-'));

t.test('the services of a fleet', async (t) => {
  t.same(Object.keys(services).sort(), [
    'export-1',
    'export-2',
    'lb',
    'migrate',
    'postgres',
    'postgres-standby',
    'redis',
  ]);
  t.same(instances, ['export-1', 'export-2']);
  for (const name of ['postgres', 'postgres-standby', 'lb'])
    t.match(services[name]!.image, /^(postgres|haproxy):\d/, `${name}: a stock image`);
});

t.test(
  'the standby streams from the primary: a base backup with -R on its first start, then a hot standby',
  async (t) => {
    const script = ([] as string[]).concat(services['postgres-standby']!.command ?? []).join(' ');
    t.match(script, /pg_basebackup -h postgres -U replicator -D "\$\$PGDATA" -R -X stream/);
    t.match(script, /exec postgres -c hot_standby=on/);
    const init = services.postgres!.volumes!.find((v) => v.includes('docker-entrypoint-initdb.d'))!;
    const file = path.join(ROOT, init.split(':')[0]!);
    accessSync(file, constants.X_OK);
    const text = readFileSync(file, 'utf8');
    t.match(text, /CREATE ROLE replicator WITH REPLICATION LOGIN/);
    t.match(text, /host replication replicator all scram-sha-256/);
    t.equal(
      services.postgres!.environment!.REPLICATION_PASSWORD,
      services['postgres-standby']!.environment!.PGPASSWORD,
      'one replication password',
    );
  },
);

t.test(
  "each instance's environment is a valid configuration with the standby, Redis and a multi-host primary",
  async (t) => {
    for (const name of [...instances, 'migrate']) {
      const env = services[name]!.environment!;
      const config = loadConfig(env);
      t.match(
        config.databaseUrl,
        /^postgres:\/\/kb:kb@postgres:5432,postgres-standby:5432\/kb\?target_session_attrs=read-write$/,
        `${name}: DATABASE_URL`,
      );
      t.same(
        config.databaseReplicaUrls,
        ['postgres://kb:kb@postgres-standby:5432/kb'],
        `${name}: DATABASE_REPLICA_URL`,
      );
      t.equal(config.redisUrl, 'redis://redis:6379', `${name}: REDIS_URL`);
    }
    for (const name of instances) {
      const s = services[name]!;
      t.match(
        s.healthcheck!.test.join(' '),
        /http:\/\/127\.0\.0\.1:3000\/readyz/,
        `${name}: health-checked through /readyz`,
      );
      t.notOk(s.ports, `${name}: not published, clients come through the load balancer`);
      t.equal(loadConfig(s.environment!).trustProxy, 1, `${name}: trusts the one proxy hop`);
    }
  },
);

t.test('the load balancer sends to every instance and checks each one through /readyz', async (t) => {
  const lb = services.lb!;
  t.same(lb.ports, ['3000:8080']);
  const mount = lb.volumes!.find((v) => v.endsWith(':/usr/local/etc/haproxy/haproxy.cfg:ro'))!;
  const cfg = readFileSync(path.join(ROOT, mount.split(':')[0]!), 'utf8');
  t.match(cfg, /^\s*bind :8080$/m);
  t.match(cfg, /^\s*option httpchk GET \/readyz$/m);
  t.match(cfg, /^\s*http-check expect status 200$/m);
  t.match(cfg, /^\s*default-server check /m);
  const servers = [...cfg.matchAll(/^\s*server (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]);
  t.same(
    servers,
    instances.map((name) => [name, `${name}:3000`]),
  );
});
