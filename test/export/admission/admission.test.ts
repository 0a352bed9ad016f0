/** ExportAdmission: slots, the bounded queue, the per-user cap (decisions.md D8.1, D8.2). */
import t from 'tap';
import { ExportAdmission } from '../../../src/export/admission/admission.js';
import { ApiError, RETRY_AFTER_S, ClientGoneError } from '../../../src/errors.js';

const limits = { concurrency: 2, queueMax: 2, queueTimeoutMs: 10_000, perUserMax: 10 };
const live = () => new AbortController().signal;

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (err: unknown) => err,
  );
}

t.test('up to `concurrency` exports stream at once; the next waits and gets the first freed slot', async (t) => {
  const a = new ExportAdmission(limits);
  const r1 = await a.acquire('u1', live());
  await a.acquire('u2', live());
  t.equal(a.streaming, 2);
  let granted = false;
  const third = a.acquire('u3', live()).then((r) => ((granted = true), r));
  await new Promise((r) => setImmediate(r));
  t.equal(a.waiting, 1);
  t.notOk(granted, 'waits while both slots are held');
  r1();
  r1(); // a second release gives nothing back twice
  const r3 = await third;
  t.ok(granted);
  t.equal(a.streaming, 2, 'the slot passed to the waiter');
  t.equal(a.waiting, 0);
  r3();
  t.equal(a.streaming, 1);
});

t.test('waiters are served in arrival order', async (t) => {
  const a = new ExportAdmission({ ...limits, concurrency: 1, queueMax: 5 });
  const first = await a.acquire('u0', live());
  const order: number[] = [];
  const waiters = [1, 2, 3].map((i) => a.acquire(`u${i}`, live()).then((release) => (order.push(i), release())));
  first();
  await Promise.all(waiters);
  t.same(order, [1, 2, 3]);
  t.equal(a.streaming, 0);
});

t.test('a full queue is 503 SERVICE_UNAVAILABLE with Retry-After (D8.1)', async (t) => {
  const a = new ExportAdmission({ ...limits, queueTimeoutMs: 200 });
  await a.acquire('a', live());
  await a.acquire('b', live());
  const queued = [rejection(a.acquire('c', live())), rejection(a.acquire('d', live()))];
  const err = await rejection(a.acquire('e', live()));
  t.equal(a.waiting, 2, 'the refused request did not queue');
  for (const q of queued)
    t.equal(((await q) as ApiError).code, 'SERVICE_UNAVAILABLE', 'the queued ones time out later');
  t.ok(err instanceof ApiError);
  t.equal((err as ApiError).code, 'SERVICE_UNAVAILABLE');
  t.equal((err as ApiError).statusCode, 503);
  t.equal((err as ApiError).retryAfterS, RETRY_AFTER_S);
});

t.test('a wait longer than queueTimeoutMs is 503 and leaves the queue (D8.1)', async (t) => {
  const a = new ExportAdmission({ ...limits, concurrency: 1, queueTimeoutMs: 50 });
  const held = await a.acquire('a', live());
  const err = await rejection(a.acquire('b', live()));
  t.equal((err as ApiError).code, 'SERVICE_UNAVAILABLE');
  t.equal(a.waiting, 0);
  held();
  t.equal(a.streaming, 0, 'the slot was not handed to the waiter that left');
});

t.test('a client that leaves while waiting leaves the queue and never gets a slot (D8.1)', async (t) => {
  const a = new ExportAdmission({ ...limits, concurrency: 1 });
  const held = await a.acquire('a', live());
  const client = new AbortController();
  const waiting = rejection(a.acquire('b', client.signal));
  await new Promise((r) => setImmediate(r));
  t.equal(a.waiting, 1);
  client.abort();
  t.ok((await waiting) instanceof ClientGoneError);
  t.equal(a.waiting, 0);
  held();
  t.equal(a.streaming, 0);
  const gone = new AbortController();
  gone.abort();
  t.ok(
    (await rejection(a.acquire('c', gone.signal))) instanceof ClientGoneError,
    'a client already gone is refused at once',
  );
  t.equal(a.streaming, 0);
});

t.test(
  'one user holds at most perUserMax places, streaming or waiting: then 429 with Retry-After (D8.2)',
  async (t) => {
    const a = new ExportAdmission({ ...limits, concurrency: 1, perUserMax: 2 });
    const r1 = await a.acquire('u', live());
    const queued = a.acquire('u', live());
    const err = await rejection(a.acquire('u', live()));
    t.equal((err as ApiError).code, 'RATE_LIMITED');
    t.equal((err as ApiError).statusCode, 429);
    t.equal((err as ApiError).retryAfterS, RETRY_AFTER_S);
    const other = a.acquire('v', live());
    t.equal(a.waiting, 2, 'another user still queues');
    r1();
    (await queued)();
    (await other)();
    const again = await a.acquire('u', live());
    t.pass('the cap counts only what the user holds now');
    again();
    t.equal(a.streaming, 0);
  },
);
