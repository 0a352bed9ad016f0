/**
 * LsnHistory: replay lag from samples of the primary's WAL position (decisions.md D11.4), on
 * positions and times given by the test.
 */
import t from 'tap';
import { LsnHistory, parseLsn } from '../../../src/db/replica/lsn-history.js';

t.test('parseLsn reads PostgreSQL WAL positions', async (t) => {
  t.equal(parseLsn('0/0'), 0n);
  t.equal(parseLsn('0/16B3748'), 0x16b3748n);
  t.equal(parseLsn('16/B374D848'), (0x16n << 32n) | 0xb374d848n);
  t.equal(parseLsn('FFFFFFFF/FFFFFFFF'), (1n << 64n) - 1n);
  for (const bad of ['', '16', '16/', 'x/1', '1/2/3', '123456789/0'])
    t.throws(() => parseLsn(bad), /not a WAL position/, JSON.stringify(bad));
});

t.test('no sample yet: lag unknown', async (t) => {
  t.equal(new LsnHistory().lag(100n, 0), null);
});

t.test('a standby at or past the newest sample is zero behind, however long the primary has been idle', async (t) => {
  const h = new LsnHistory();
  h.record(100n, 0);
  h.record(100n, 60_000);
  t.same(h.lag(100n, 3_600_000), { ms: 0, known: true });
  t.same(h.lag(150n, 3_600_000), { ms: 0, known: true });
  t.equal(h.size, 1, 'an unchanged position adds no sample');
});

t.test('behind: the time since the primary first had WAL past the replay position', async (t) => {
  const h = new LsnHistory();
  h.record(100n, 0);
  h.record(200n, 1000);
  h.record(300n, 2000);
  t.same(h.lag(100n, 2500), { ms: 1500, known: true }, 'lacks 101..: first seen at 1000');
  t.same(h.lag(250n, 2500), { ms: 500, known: true });
  t.same(
    h.lag(100n, 10_000),
    { ms: 9000, known: true },
    'a stuck standby falls further behind while the primary is idle',
  );
});

t.test('behind the oldest sample: a lower bound, not known', async (t) => {
  const h = new LsnHistory();
  h.record(100n, 1000);
  t.same(h.lag(50n, 1500), { ms: 500, known: false });
});

t.test('forget keeps the newest sample at or below the slowest standby, so its lag stays known', async (t) => {
  const h = new LsnHistory();
  for (let i = 1; i <= 5; i++) h.record(BigInt(i * 100), i * 1000);
  h.forget(350n);
  t.equal(h.size, 3, '300, 400, 500 kept');
  t.same(h.lag(350n, 6000), { ms: 2000, known: true });
  h.forget(10_000n);
  t.equal(h.size, 1);
  t.same(h.lag(500n, 9000), { ms: 0, known: true });
});

t.test('a lower position means a new primary: the history restarts', async (t) => {
  const h = new LsnHistory();
  h.record(500n, 0);
  h.record(300n, 1000);
  t.equal(h.size, 1);
  t.same(h.lag(200n, 1500), { ms: 500, known: false });
});

t.test('the history is bounded', async (t) => {
  const h = new LsnHistory(3);
  for (let i = 1; i <= 10; i++) h.record(BigInt(i), i);
  t.equal(h.size, 3);
  t.same(h.lag(1n, 20), { ms: 12, known: false }, 'older than the history reaches: a lower bound');
});
