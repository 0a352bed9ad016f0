/**
 * Change tokens (decisions.md D12.1, D12.4): opaque, URL-safe, verified; bound to the knowledge
 * base and its incarnation, the database, the options, the media proxy prefix and the output
 * format; refused with 400 INVALID_PARAMETER or 410 CHANGE_TOKEN_EXPIRED as D12.4 says.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { ExportOptions } from '../../src/export/request/export-request.js';
import fc from 'fast-check';
import t from 'tap';
import {
  ChangeTokens,
  ExpiredChangeTokenError,
  InvalidChangeTokenError,
  loadChangeTokenSecret,
  MAX_TOKEN_CHARS,
  StandbyBehindTokenError,
} from '../../src/export/change-token.js';
import { readChangeState, type ChangeState } from '../../src/export/change-state.js';
import { ApiError, DependencyError } from '../../src/errors.js';
import type { Sql } from '../../src/db/connect.js';
import { doc, seed, simpleSeed } from '../helpers/app.js';
import { createTestDatabase } from '../helpers/db.js';

const SECRET = randomBytes(32);
const CONFIG = { secret: SECRET, retentionDays: 30, mediaProxyPrefix: '/media/', outputFormat: '1' };
const OPTS: ExportOptions = { excludeCategories: true, includeContentHtml: true };
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
    timeline: 1,
    visible: null,
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

const since = (snapshot: string, visible = '{}') => ({ snapshot, visible });
const ascending = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

t.test('a token is URL-safe and opaque, and gives back the snapshot it was issued with', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  t.match(token, /^[A-Za-z0-9_-]+$/, 'base64url: no escaping in a query string or a header');
  t.ok(token.length < 120, `short (${token.length} characters)`);
  t.notMatch(Buffer.from(token, 'base64url').toString('latin1'), /b-1|media|1000/, 'names nothing in clear');
  t.same(
    tokens.accept(token, state({ snapshot: '1005:1020:1005,1012', nowS: 1_800_000_100 }), OPTS),
    since('1000:1010:1002,1005'),
  );
  t.same(
    tokens.accept(token, state({ snapshot: '1005:1020:1005,1012' }), { ...OPTS }),
    since('1000:1010:1002,1005'),
    'the same options, another object',
  );
});

t.test('any pg_snapshot survives the round trip, exactly, and no token outgrows MAX_TOKEN_CHARS', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  let horizons = 0;
  fc.assert(
    fc.property(
      fc.bigInt({ min: 3n, max: 2n ** 62n }),
      fc.uniqueArray(fc.bigInt({ min: 0n, max: 100_000n }), { maxLength: 3000 }),
      fc.bigInt({ min: 0n, max: 200_000n }),
      (xmin, offsets, span) => {
        const xip = offsets.map((o) => xmin + o).sort(ascending);
        const xmax = xmin + (offsets.length ? offsets.reduce((a, b) => (a > b ? a : b)) + 1n : 0n) + span;
        const snapshot = `${xmin}:${xmax}:${xip.join(',')}`;
        const token = tokens.issue(state({ snapshot }), OPTS);
        if (token.length > MAX_TOKEN_CHARS) return false;
        const got = tokens.accept(token, state({ snapshot: `${xmax}:${xmax}:` }), OPTS);
        if (got.snapshot === snapshot) return got.visible === '{}';
        horizons++;
        // Too long to carry: everything from xmin on counts as unseen, a superset of the exact delta.
        return got.snapshot === `${xmin}:${xmin}:` && got.visible === '{}' && xip.length > 600;
      },
    ),
    { numRuns: 200 },
  );
  t.pass(`${horizons} of 200 fell back to the horizon`);
});

t.test('a long running list: the visible writers of the book instead, when they are fewer', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const running = Array.from({ length: 3000 }, (_, i) => 100_000n + 3n * BigInt(i));
  const snapshot = `100000:110000:${running.join(',')}`;
  const visible = [100_001n, 100_004n, 109_000n];
  const token = tokens.issue(state({ snapshot, visible }), OPTS);
  t.ok(token.length < 150, `${token.length} characters for 3,000 running transactions`);
  const later = state({ snapshot: '110000:110000:' });
  t.same(
    tokens.accept(token, later, OPTS),
    since('100000:100000:', '{100001,100004,109000}'),
    'unseen: from xmin on, but for the listed ones',
  );
  t.same(
    tokens.accept(tokens.issue(state(), OPTS), later, OPTS),
    since('1000:1010:1002,1005'),
    'a short running list is kept as it is',
  );
  const many = Array.from({ length: 1025 }, (_, i) => 100_001n + 3n * BigInt(i));
  const horizon = tokens.issue(state({ snapshot, visible: many }), OPTS);
  t.same(
    tokens.accept(horizon, later, OPTS),
    since('100000:100000:'),
    'more writers than VISIBLE_MAX: the horizon, a superset',
  );
  t.ok(horizon.length < 150);
});

t.test('a token issued on a standby names the writers it saw, so its delta is exact there too', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  // The standby's pg_current_snapshot() lists nothing between xmin and xmax, running or not.
  const token = tokens.issue(state({ snapshot: '1000:1010:', inRecovery: true, visible: [1003n, 1007n] }), OPTS);
  const expected = since('1000:1000:', '{1003,1007}');
  t.same(
    tokens.accept(token, state({ snapshot: '1010:1020:', inRecovery: true }), OPTS),
    expected,
    'answered on a standby that finished everything below 1010',
  );
  t.same(
    tokens.accept(token, state({ snapshot: '1004:1020:1004,1012' }), OPTS),
    expected,
    'the same on the primary: the same delta bytes (D12.7)',
  );
  t.same(
    tokens.accept(tokens.issue(state({ snapshot: '1000:1010:', inRecovery: true, visible: [] }), OPTS), state(), OPTS),
    since('1000:1000:', '{}'),
    'no writer of the book between xmin and xmax',
  );
});

t.test('a standby that has not finished what the token saw passes it on, never a 410 (D12.7)', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const primary = tokens.issue(state(), OPTS);
  const behind = (s: ChangeState) => {
    try {
      tokens.accept(primary, s, OPTS);
    } catch (err) {
      return err;
    }
    return undefined;
  };
  const lagging = behind(state({ snapshot: '1009:1030:', inRecovery: true }));
  t.ok(lagging instanceof StandbyBehindTokenError, 'xmin 1009 < xmax 1010: 1009 may not have finished there');
  t.ok(
    lagging instanceof DependencyError && lagging.dependency === 'replica',
    "a replica's outage: the request reads the primary",
  );
  t.notOk(lagging instanceof ApiError, 'no status of its own');
  t.same(
    tokens.accept(primary, state({ snapshot: '1010:1030:', inRecovery: true }), OPTS),
    since('1000:1010:1002,1005'),
    'caught up: the exact delta',
  );
  t.match(
    behind(state({ snapshot: '1010:1030:', inRecovery: true, timeline: 2 })),
    { name: 'StandbyBehindTokenError', message: /timeline 2/ },
    'another timeline: the primary decides',
  );
  t.equal(tokens.answerableAbove(primary, '1009'), false);
  t.equal(tokens.answerableAbove(primary, '1010'), true);
  t.equal(
    tokens.answerableAbove('not a token', '0'),
    true,
    'a token it cannot read: the export refuses it wherever it runs',
  );
});

t.test('malformed and forged tokens: 400 INVALID_PARAMETER', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  for (const bad of ['', 'x', 'not a token', '%%%', `${token}=`, token.slice(0, 40), 'A'.repeat(100_000)]) {
    t.match(
      refusal(tokens, bad, state()),
      { reason: 'malformed', status: 400, code: 'INVALID_PARAMETER' },
      JSON.stringify(bad.slice(0, 30)),
    );
  }
  const raw = Buffer.from(token, 'base64url');
  for (const at of [1, 5, 40, raw.length - 20, raw.length - 1]) {
    const forged = Buffer.from(raw);
    forged[at]! ^= 1;
    t.match(
      refusal(tokens, forged.toString('base64url'), state()),
      { reason: 'forged', status: 400 },
      `byte ${at} changed`,
    );
  }
  const other = new ChangeTokens({ ...CONFIG, secret: randomBytes(32) }).issue(state(), OPTS);
  t.match(refusal(tokens, other, state()), { reason: 'forged', status: 400 }, 'made with another secret');
  t.match(refusal(tokens, `${token}AA`, state()), { reason: 'forged' }, 'bytes appended');
});

t.test('another book, incarnation, option set or prefix: 400, saying which', async (t) => {
  const tokens = new ChangeTokens(CONFIG);
  const token = tokens.issue(state(), OPTS);
  t.match(refusal(tokens, token, state({ bookId: 'b-2' })), {
    reason: 'other-book',
    status: 400,
    message: /another knowledge base/,
  });
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
      message:
        'changedSince was issued for excludeCategories=true&includeContentHtml=true, not ' +
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
  t.match(refusal(tokens, token, state({ databaseId: '7312345678901234567/16385' })), {
    ...gone,
    reason: 'other-database',
  });
  t.match(refusal(new ChangeTokens({ ...CONFIG, outputFormat: '2' }), token, state()), {
    ...gone,
    reason: 'other-format',
  });
  t.equal(
    refusal(tokens, token, state({ nowS: 1_800_000_000 + 30 * DAY })),
    undefined,
    'exactly CHANGE_RETENTION_DAYS old: still good',
  );
  t.match(refusal(tokens, token, state({ nowS: 1_800_000_001 + 30 * DAY })), {
    ...gone,
    reason: 'expired',
    message: /30 days/,
  });
  t.match(refusal(new ChangeTokens({ ...CONFIG, retentionDays: 1 }), token, state({ nowS: 1_800_000_001 + DAY })), {
    reason: 'expired',
  });
  t.equal(refusal(tokens, token, state({ tokenFloor: '1000' })), undefined, 'removals kept down to its xmin');
  t.match(refusal(tokens, token, state({ tokenFloor: '1001' })), { ...gone, reason: 'pruned' });
  t.match(
    refusal(tokens, token, state({ snapshot: '1000:1009:1002,1005' })),
    { ...gone, reason: 'ahead' },
    'an older xmax',
  );
  t.match(refusal(tokens, token, state({ timeline: 2 })), {
    ...gone,
    reason: 'other-timeline',
    message: /timeline 1, before a failover to timeline 2/,
  });
  t.match(
    refusal(tokens, tokens.issue(state({ timeline: 3 }), OPTS), state({ timeline: 2 })),
    { ...gone, reason: 'other-timeline' },
    'a newer one too',
  );
  t.match(
    refusal(tokens, versionOne(token), state()),
    { ...gone, reason: 'other-format', message: /earlier release/ },
    "a release before this one's tokens",
  );
  t.match(
    refusal(tokens, token, state({ snapshot: '1000:1012:1001,1002,1005' })),
    { ...gone, reason: 'ahead' },
    '1001 was visible to the token, runs now',
  );
  t.equal(
    refusal(tokens, token, state({ snapshot: '1002:1012:1002,1005,1011' })),
    undefined,
    'a later snapshot, still running what ran then',
  );
  t.ok(
    new ExpiredChangeTokenError('expired', 'x') instanceof ApiError,
    'the errors are ApiErrors: the route answers them in the envelope',
  );
});

async function bookState(sql: Sql): Promise<ChangeState> {
  return sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', (tx) =>
    readChangeState((text, params) => tx.unsafe(text, params) as never, 'b-u1'),
  );
}

t.test('on a real database: its secret, a re-created book, a TRUNCATE', async (t) => {
  const { sql } = await createTestDatabase(t);
  await seed(sql, simpleSeed([doc('d1', 'a1')]));
  const secret = await loadChangeTokenSecret(sql);
  t.equal(secret.length, 32);
  const tokens = new ChangeTokens({ ...CONFIG, secret });
  const token = tokens.issue(await bookState(sql), OPTS);
  await sql`UPDATE documents SET name = 'x'`;
  t.match(tokens.accept(token, await bookState(sql), OPTS), { snapshot: /^\d+:\d+:/, visible: '{}' });

  const [book] = await sql`SELECT * FROM books`;
  const docs = await sql`SELECT * FROM documents`;
  await sql.begin(async (tx) => {
    await tx`DELETE FROM books`;
    await tx`INSERT INTO books ${tx(book!)}`;
    await tx`INSERT INTO documents ${tx(docs as never)}`;
  });
  t.match(
    refusal(tokens, token, await bookState(sql)),
    { reason: 'recreated-book', status: 400 },
    'the same id and data, another incarnation',
  );

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
  t.equal(
    refusal(tokens, tokens.issue(await bookState(sql), OPTS), await bookState(sql)),
    undefined,
    'one issued after is good',
  );
});

/** Resolves once `check` holds; rejects after a minute. */
async function waitFor(check: () => Promise<boolean>): Promise<void> {
  const until = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not met within a minute');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `token` as the previous release wrote it (version 1, no timeline), signed with the same secret. */
function versionOne(token: string): string {
  const raw = Buffer.from(token, 'base64url');
  const body = Buffer.from(raw.subarray(0, raw.length - 16));
  body[0] = 1;
  const mac = createHmac('sha256', SECRET).update('kb-export change token\0').update(body).digest().subarray(0, 16);
  return Buffer.concat([body, mac]).toString('base64url');
}
