/**
 * Change tokens (decisions.md D12.1, D12.4): opaque, URL-safe, verified; bound to the knowledge
 * base and its incarnation, the database, the options, the media proxy prefix and the output
 * format; refused with 400 INVALID_PARAMETER or 410 CHANGE_TOKEN_EXPIRED as D12.4 says.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import {
  ChangeTokens,
  ExpiredChangeTokenError,
  InvalidChangeTokenError,
  loadChangeTokenSecret,
  type ChangeOptions,
} from '../../src/export/change-token.js';
import { readChangeState, type ChangeState } from '../../src/export/snapshot/changes-query.js';
import { ApiError } from '../../src/errors.js';
import type { Sql } from '../../src/db/connect.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';

const SECRET = randomBytes(32);
const CONFIG = { secret: SECRET, retentionDays: 30, mediaProxyPrefix: '/media/', outputFormat: '1' };
const OPTS: ChangeOptions = { excludeCategories: true, includeContentHtml: true };
const DAY = 86_400;

function state(over: Partial<ChangeState> = {}): ChangeState {
  return {
    bookId: 'b-1',
    changeEpoch: '6f1c1a52-32a4-4f57-9d0e-0d7c2b0e8a11',
    snapshot: '1000:1010:1002,1005',
    inRecovery: false,
    nowS: 1_800_000_000,
    tokenFloor: '0',
    databaseId: '7312345678901234567/16384',
    ...over,
  };
}

/** What accept throws for `token` in `s`: the error's class name, reason and status. */
function refusal(tokens: ChangeTokens, token: string, s: ChangeState, opts = OPTS) {
  try {
    tokens.accept(token, s, opts);
  } catch (err) {
    const e = err as InvalidChangeTokenError | ExpiredChangeTokenError;
    return { name: e.name, reason: e.reason, status: e.statusCode, code: e.code, message: e.message };
  }
  return undefined;
}

t.test('a token is URL-safe and opaque, and gives back the snapshot it was issued with', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  t.match(token, /^[A-Za-z0-9_-]+$/, 'base64url: no escaping in a query string or a header');
  t.ok(token.length < 120, `short (${token.length} characters)`);
  t.notMatch(Buffer.from(token, 'base64url').toString('latin1'), /b-1|media|1000/, 'names nothing in clear');
  t.equal(tokens.accept(token, state({ snapshot: '1005:1020:1005,1012', nowS: 1_800_000_100 }), OPTS), '1000:1010:1002,1005');
  t.equal(tokens.accept(token, state({ snapshot: '1005:1020:1005,1012' }), { ...OPTS }), '1000:1010:1002,1005', 'the same options, another object');
});

t.test('any pg_snapshot survives the round trip', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  fc.assert(
    fc.property(
      fc.bigInt({ min: 3n, max: 2n ** 62n }),
      fc.uniqueArray(fc.bigInt({ min: 0n, max: 100_000n }), { maxLength: 50 }),
      fc.bigInt({ min: 0n, max: 200_000n }),
      (xmin, offsets, span) => {
        const xip = offsets.map((o) => xmin + o).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        const xmax = xmin + (offsets.length ? offsets.reduce((a, b) => (a > b ? a : b)) + 1n : 0n) + span;
        const snapshot = `${xmin}:${xmax}:${xip.join(',')}`;
        const token = tokens.issue(state({ snapshot }), OPTS);
        return tokens.accept(token, state({ snapshot: `${xmax}:${xmax}:` }), OPTS) === snapshot;
      },
    ),
  );
  t.pass();
});

t.test('malformed and forged tokens: 400 INVALID_PARAMETER', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  for (const bad of ['', 'x', 'not a token', '%%%', `${token}=`, token.slice(0, 40), 'A'.repeat(100_000)]) {
    t.match(refusal(tokens, bad, state()), { reason: 'malformed', status: 400, code: 'INVALID_PARAMETER' }, JSON.stringify(bad.slice(0, 30)));
  }
  const raw = Buffer.from(token, 'base64url');
  for (const at of [1, 5, 40, raw.length - 20, raw.length - 1]) {
    const forged = Buffer.from(raw);
    forged[at]! ^= 1;
    t.match(refusal(tokens, forged.toString('base64url'), state()), { reason: 'forged', status: 400 }, `byte ${at} changed`);
  }
  const other = new ChangeTokens({ ...CONFIG, secret: randomBytes(32) }).issue(state(), OPTS);
  t.match(refusal(tokens, other, state()), { reason: 'forged', status: 400 }, 'made with another secret');
  t.match(refusal(tokens, `${token}AA`, state()), { reason: 'forged' }, 'bytes appended');
});

t.test('another book, incarnation, option set or prefix: 400, saying which', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  t.match(refusal(tokens, token, state({ bookId: 'b-2' })), { reason: 'other-book', status: 400, message: /another knowledge base/ });
  t.match(refusal(tokens, token, state({ changeEpoch: '0e4f0c5c-7d1e-4a52-8a3b-1a2b3c4d5e6f' })), {
    reason: 'recreated-book',
    status: 400,
    message: /deleted and created again/,
  });
  for (const opts of [
    { excludeCategories: false, includeContentHtml: true },
    { excludeCategories: true, includeContentHtml: false },
    { excludeCategories: false, includeContentHtml: false },
  ]) {
    t.match(refusal(tokens, token, state(), opts), {
      reason: 'other-options',
      status: 400,
      message: 'changedSince was issued for excludeCategories=true&includeContentHtml=true, not ' +
        `excludeCategories=${opts.excludeCategories}&includeContentHtml=${opts.includeContentHtml}`,
    });
  }
  const elsewhere = new ChangeTokens({ ...CONFIG, mediaProxyPrefix: 'https://cdn.example.com/m/' });
  t.match(refusal(elsewhere, token, state()), { reason: 'other-prefix', status: 400 });
  t.equal(refusal(elsewhere, elsewhere.issue(state(), OPTS), state()), undefined, 'its own tokens are fine');
});

t.test('another database or output format, too old, pruned or ahead: 410 CHANGE_TOKEN_EXPIRED', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  const gone = { status: 410, code: 'CHANGE_TOKEN_EXPIRED', name: 'ExpiredChangeTokenError' };
  t.match(refusal(tokens, token, state({ databaseId: '7312345678901234567/16385' })), { ...gone, reason: 'other-database' });
  t.match(refusal(new ChangeTokens({ ...CONFIG, outputFormat: '2' }), token, state()), { ...gone, reason: 'other-format' });
  t.equal(refusal(tokens, token, state({ nowS: 1_800_000_000 + 30 * DAY })), undefined, 'exactly CHANGE_RETENTION_DAYS old: still good');
  t.match(refusal(tokens, token, state({ nowS: 1_800_000_001 + 30 * DAY })), { ...gone, reason: 'expired', message: /30 days/ });
  t.match(refusal(new ChangeTokens({ ...CONFIG, retentionDays: 1 }), token, state({ nowS: 1_800_000_001 + DAY })), { reason: 'expired' });
  t.equal(refusal(tokens, token, state({ tokenFloor: '1000' })), undefined, 'removals kept down to its xmin');
  t.match(refusal(tokens, token, state({ tokenFloor: '1001' })), { ...gone, reason: 'pruned' });
  t.match(refusal(tokens, token, state({ snapshot: '1000:1009:1002,1005' })), { ...gone, reason: 'ahead' }, 'an older xmax');
  t.match(refusal(tokens, token, state({ snapshot: '1000:1012:1001,1002,1005' })), { ...gone, reason: 'ahead' }, '1001 was visible to the token, runs now');
  t.equal(refusal(tokens, token, state({ snapshot: '1002:1012:1002,1005,1011' })), undefined, 'a later snapshot, still running what ran then');
  t.ok(new ExpiredChangeTokenError('expired', 'x') instanceof ApiError, 'the errors are ApiErrors: the route answers them in the envelope');
});

t.test('on a hot standby only what finished before the snapshot counts (its snapshots list no running transactions)', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const standby = tokens.issue(state({ snapshot: '1000:1010:', inRecovery: true }), OPTS);
  t.equal(tokens.accept(standby, state({ snapshot: '1004:1020:1004' }), OPTS), '1000:1000:', 'issued there: changes since its xmin');
  const primary = tokens.issue(state(), OPTS);
  t.equal(tokens.accept(primary, state({ snapshot: '1000:1030:', inRecovery: true }), OPTS), '1000:1000:', 'read there: since the token\'s xmin');
  t.match(refusal(tokens, primary, state({ snapshot: '999:1030:', inRecovery: true })), { reason: 'ahead' }, 'a standby behind the token');
});

async function bookState(sql: Sql): Promise<ChangeState> {
  return sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', (tx) => readChangeState((text, params) => tx.unsafe(text, params) as never, 'b-u1'));
}

t.test('on a real database: its secret, a re-created book, a TRUNCATE', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1')]));
  const secret = await loadChangeTokenSecret(sql);
  t.equal(secret.length, 32);
  const tokens = new ChangeTokens({ ...CONFIG, secret });
  const token = tokens.issue(await bookState(sql), OPTS);
  await sql`UPDATE documents SET name = 'x'`;
  const since = tokens.accept(token, await bookState(sql), OPTS);
  t.match(since, /^\d+:\d+:/);

  const [book] = await sql`SELECT * FROM books`;
  const docs = await sql`SELECT * FROM documents`;
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books`;
    await tx`INSERT INTO books ${tx(book!)}`;
    await tx`INSERT INTO documents ${tx(docs as never)}`;
  });
  t.match(refusal(tokens, token, await bookState(sql)), { reason: 'recreated-book', status: 400 }, 'the same id and data, another incarnation');

  const fresh = tokens.issue(await bookState(sql), OPTS);
  t.equal(refusal(tokens, fresh, await bookState(sql)), undefined);
  await sql`TRUNCATE documents, rewrite_plans`;
  t.match(refusal(tokens, fresh, await bookState(sql)), { reason: 'pruned', status: 410 }, 'TRUNCATE expires it');
  // The server is shared: a write transaction that began before the TRUNCATE, in any database,
  // holds every snapshot's xmin below the floor until it ends.
  await waitFor(async () => {
    const s = await bookState(sql);
    return BigInt(s.snapshot.split(':')[0]!) >= BigInt(s.tokenFloor);
  });
  t.equal(refusal(tokens, tokens.issue(await bookState(sql), OPTS), await bookState(sql)), undefined, 'one issued after is good');
});

/** Resolves once `check` holds; rejects after a minute. */
async function waitFor(check: () => Promise<boolean>): Promise<void> {
  const until = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not met within a minute');
    await new Promise((r) => setTimeout(r, 50));
  }
}
