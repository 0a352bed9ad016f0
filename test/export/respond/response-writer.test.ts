/**
 * The response writer's rules for slow and vanished clients (decisions.md D6.3, D6.4, D8.3), against
 * a real node:http server streaming a generator of bytes through a ResponseWriter, and real
 * net.Socket clients that pause their socket and read N bytes every interval. No fake timers: the
 * kernel's socket buffers are part of what is tested (test/helpers/slow-client.ts). Each client's raw
 * bytes are decoded, so "aborted" means a chunked body without its terminating chunk.
 */
import { ClientGoneError, type GoneReason } from '../../../src/errors.js';
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Sql } from '../../../src/db/connect.js';
import { loadConfig } from '../../../src/config.js';
import { ChangeTokens } from '../../../src/export/change-token.js';
import { pipelineSettings, streamExport } from '../../../src/export/export-pipeline.js';
import { ResponseWriter, type ResponseWriterOptions } from '../../../src/export/respond/response-writer.js';
import { bytes, CHUNK, Client, KB, MB, serve } from '../../helpers/slow-client.js';

/** Streams `total` bytes through `writer`; resolves to 'complete' or the reason the client was dropped. */
async function stream(res: ServerResponse, writer: ResponseWriter, total: number): Promise<'complete' | GoneReason> {
  try {
    writer.check();
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    for await (const piece of bytes(total)) await writer.write(piece);
    res.end();
    return 'complete';
  } catch (err) {
    if (err instanceof ClientGoneError) return err.reason;
    throw err;
  } finally {
    writer.close();
  }
}

const options = (o: Partial<ResponseWriterOptions>): ResponseWriterOptions => ({
  stallTimeoutMs: 3000,
  minDrainBytesPerS: 16 * KB,
  maxDurationMs: 0,
  ...o,
});

t.test(
  'a reader at 256 KB/s is kept over several windows while the server waits on it, and gets the whole body (D8.3)',
  async (t) => {
    const server = await serve(t);
    const total = 16 * MB; // far more than the kernel's socket buffers take, so the server waits on the reader
    const client = await Client.get(server.port);
    const x = await server.next();
    const writer = new ResponseWriter(x.res, options({ stallTimeoutMs: 3000, minDrainBytesPerS: 16 * KB }));
    let lastDrain = Date.now();
    let longestDrainGap = 0;
    x.res.on('drain', () => {
      longestDrainGap = Math.max(longestDrainGap, Date.now() - lastDrain);
      lastDrain = Date.now();
    });
    const outcome = stream(x.res, writer, total);
    client.readEvery(26 * KB, 100);
    await sleep(8000);
    t.equal(writer.reason, null, 'not dropped after ~8 s');
    t.notOk(writer.reason !== null);
    t.ok(client.received > 1.5 * MB && client.received < 3 * MB, `read at ~256 KB/s: ${client.received} bytes in 8 s`);
    t.ok(
      writer.bytes < total,
      `the server was still waiting on the client (${writer.bytes} of ${total} bytes handed over)`,
    );
    t.comment(`longest gap between 'drain' events: ${Math.max(longestDrainGap, Date.now() - lastDrain)} ms`);
    const res = await client.readRest();
    t.equal(await outcome, 'complete');
    t.strictSame(res, { status: 200, body: total, complete: true }, 'the whole body with its terminating chunk');
  },
);

t.test(
  'a reader taking 64 KB every 4 s against a 64 KB/s floor is dropped within a few windows; its body is cut (D8.3, D6.3)',
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    const writer = new ResponseWriter(x.res, options({ stallTimeoutMs: 3000, minDrainBytesPerS: 64 * KB }));
    const outcome = stream(x.res, writer, 64 * MB);
    client.readEvery(64 * KB, 4000);
    const reason = await outcome;
    const ms = Date.now() - x.started;
    t.ok(reason === 'too-slow' || reason === 'stalled', `dropped as ${reason}`);
    t.ok(ms >= 3000 && ms < 10_000, `dropped after ${ms} ms, within a few 3 s windows`);
    t.ok(writer.reason !== null);
    const res = await client.readRest();
    t.equal(res.status, 200);
    t.notOk(res.complete, 'no terminating chunk: the body is visibly aborted');
    t.ok(res.body < 64 * MB, `${res.body} bytes received`);
  },
);

t.test('a reader below the floor: kept when the floor is 0, dropped as too slow otherwise (D8.3)', async (t) => {
  const server = await serve(t);
  const total = 32 * MB;
  const floorless = await Client.get(server.port);
  const x0 = await server.next();
  const floored = await Client.get(server.port);
  const x1 = await server.next();
  const w0 = new ResponseWriter(x0.res, options({ stallTimeoutMs: 3000, minDrainBytesPerS: 0 }));
  const w1 = new ResponseWriter(x1.res, options({ stallTimeoutMs: 3000, minDrainBytesPerS: MB }));
  const outcomes = [stream(x0.res, w0, total), stream(x1.res, w1, total)];
  // 256 KB/s: the client's kernel shows progress well within every 3 s window, a quarter of the floor.
  floorless.readEvery(26 * KB, 100);
  floored.readEvery(26 * KB, 100);
  t.equal(await outcomes[1], 'too-slow', 'the floor drops it');
  t.ok(Date.now() - x1.started < 7000, `within ${Date.now() - x1.started} ms`);
  await sleep(Math.max(0, x0.started + 7000 - Date.now()));
  t.equal(w0.reason, null, 'floor 0: the same reader is still served after 7 s');
  t.ok(w0.bytes < total, 'and the server was still waiting on it');
  const res = await floorless.readRest();
  t.equal(await outcomes[0], 'complete');
  t.strictSame(res, { status: 200, body: total, complete: true });
  t.notOk((await floored.readRest()).complete);
});

t.test('a reader that stops reading is dropped as stalled after about STALL_TIMEOUT_MS (D6.4)', async (t) => {
  const server = await serve(t);
  const client = await Client.get(server.port);
  const x = await server.next();
  // Floor 0, the stall rule alone: with a floor, the last bytes the client's kernel took in after the
  // reader stopped make the first full window "too slow" at about the same time.
  const writer = new ResponseWriter(x.res, options({ stallTimeoutMs: 1000, minDrainBytesPerS: 0 }));
  const reason = await stream(x.res, writer, 64 * MB);
  const ms = Date.now() - x.started;
  t.equal(reason, 'stalled');
  t.ok(ms >= 1000 && ms < 4000, `dropped after ${ms} ms`);
  await t.rejects(
    writer.write(Buffer.from('more')),
    { name: 'ClientGoneError', reason: 'stalled' },
    'later writes fail at once',
  );
  const res = await client.readRest();
  t.notOk(res.complete, 'the body is aborted');
  t.ok(res.body > 0 && res.body < 64 * MB, `${res.body} bytes were sent before the stall`);
});

t.test(
  'the deadline aborts the response mid-stream, even while the export waits on something else (D8.3)',
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    const writer = new ResponseWriter(x.res, options({ maxDurationMs: 1000 }));
    x.res.writeHead(200);
    await writer.write(Buffer.alloc(4 * KB, 'x'));
    const reading = client.readRest();
    // The "database" takes 5 s; the writer's signal ends the wait when the deadline aborts the export.
    const waited = await sleep(5000, 'db', { signal: writer.signal }).catch((err: unknown) => err);
    const ms = Date.now() - x.started;
    t.ok(
      waited instanceof Error && (waited as { cause?: unknown }).cause instanceof ClientGoneError,
      'the wait was aborted',
    );
    t.ok(ms >= 1000 && ms < 4000, `aborted after ${ms} ms, not after the 5 s wait`);
    t.throws(() => writer.check(), { name: 'ClientGoneError', reason: 'deadline' });
    await t.rejects(
      writer.write(Buffer.from('late')),
      { name: 'ClientGoneError', reason: 'deadline' },
      'later writes fail at once',
    );
    writer.close();
    const res = await reading;
    t.ok(Date.now() - x.started < 1500, 'the client saw the connection close at the deadline');
    t.strictSame(res, { status: 200, body: 4 * KB, complete: false }, 'an aborted chunked body');
  },
);

t.test(
  'a client that closed before the writer was made: check() throws at once, write() does not wait (D6.4)',
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    // The key and book lookups take a while; the client leaves meanwhile.
    client.socket.destroy();
    await once(x.res, 'close');
    await sleep(50);
    const writer = new ResponseWriter(x.res, options({ maxDurationMs: 60_000 }));
    t.not(writer.reason, null, 'gone from the start');
    t.throws(() => writer.check(), { name: 'ClientGoneError', reason: 'gone' });
    const start = Date.now();
    await t.rejects(
      writer.write(Buffer.alloc(CHUNK)),
      { name: 'ClientGoneError', reason: 'gone' },
      'write() fails at once',
    );
    t.ok(Date.now() - start < 100, 'no wait for a drain that never comes');
    t.ok(writer.signal.aborted, 'the signal tells the export to stop');
    writer.close();
  },
);

t.test(
  'streamExport: a client gone during the lookups ends the export before it takes a connection (D6.4)',
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    client.socket.destroy();
    await once(x.res, 'close');
    let began = 0;
    const sql = {
      begin: () => {
        began++;
        return Promise.reject(new Error('this test has no database'));
      },
    } as unknown as Sql;
    const config = loadConfig({
      EXPORT_BATCH_SIZE: '10',
      STALL_TIMEOUT_MS: '60000',
      MIN_DRAIN_BYTES_PER_S: String(16 * KB),
    });
    const changeTokens = new ChangeTokens({
      secret: Buffer.alloc(32, 1),
      retentionDays: 30,
      mediaProxyPrefix: '/media/',
      outputFormat: '1',
    });
    const request = {
      caller: { userId: 'u1', keyId: 'k1' },
      bookSlug: 'kb',
      options: { excludeCategories: false, includeContentHtml: true },
      format: 'json',
      encoding: 'identity',
      changedSince: null,
      after: null,
    } as const;
    const run = { sql, onStandby: false, changeTokens, captureUpTo: 0, onHeaders: () => {}, stop: null };
    const result = await streamExport(request, x.res, pipelineSettings(config, true, null, null), run);
    t.equal(result.outcome, 'client_gone');
    t.equal(began, 0, 'no transaction was begun');
  },
);

t.test('half-close: a client that sends FIN after its request gets nothing, and the writer sees it gone', async (t) => {
  const server = await serve(t);
  const client = await Client.get(server.port, true);
  const x = await server.next();
  await sleep(200); // the lookups, during which the FIN arrives
  t.ok(x.res.destroyed, "Node's http server (httpAllowHalfOpen false) destroyed the response on the FIN");
  const writer = new ResponseWriter(x.res, options({}));
  t.equal(await stream(x.res, writer, MB), 'gone');
  const raw = await client.readRest();
  t.equal(client.received, 0, 'the client read no byte of the response');
  t.equal(raw.status, 0);
});

t.test(
  "half-close mid-stream: the connection closes once Node's queue went out, the pending write fails, the body is cut",
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    const writer = new ResponseWriter(x.res, options({ stallTimeoutMs: 20_000 }));
    const outcome = stream(x.res, writer, 64 * MB);
    client.readEvery(256 * KB, 20);
    await sleep(200);
    const finAt = Date.now();
    client.socket.end();
    t.equal(await outcome, 'gone');
    t.ok(Date.now() - finAt < 2000, `${Date.now() - finAt} ms after the FIN, not after the stall timeout`);
    const res = await client.readRest();
    t.equal(res.status, 200);
    t.notOk(res.complete, 'no terminating chunk');
  },
);

t.test(
  'close() clears the timers: neither the deadline nor the stall rule fires afterwards; none keeps the process alive',
  async (t) => {
    const server = await serve(t);
    const client = await Client.get(server.port);
    const x = await server.next();
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const writer = new ResponseWriter(
      x.res,
      options({ stallTimeoutMs: 300, minDrainBytesPerS: 16 * KB, maxDurationMs: 600 }),
    );
    x.res.writeHead(200);
    let writes = 0;
    const pending = (async () => {
      for await (const piece of bytes(16 * MB)) {
        await writer.write(piece);
        writes++;
      }
    })();
    await sleep(100);
    t.equal(timers(), before, 'the deadline and the sampler are unref()ed while the client stalls');
    writer.close();
    await sleep(1000);
    t.equal(writer.reason, null, 'not dropped 1 s after close(), past both the stall timeout and the deadline');
    t.ok(writes > 0, 'it was waiting on the client');
    const reading = client.readRest();
    await pending;
    x.res.end();
    t.strictSame(await reading, { status: 200, body: 16 * MB, complete: true });
  },
);

t.test('options out of range are refused', async (t) => {
  const server = await serve(t);
  const client = await Client.get(server.port);
  const x = await server.next();
  t.throws(() => new ResponseWriter(x.res, options({ stallTimeoutMs: 0 })), RangeError);
  t.throws(() => new ResponseWriter(x.res, options({ minDrainBytesPerS: -1 })), RangeError);
  t.throws(() => new ResponseWriter(x.res, options({ maxDurationMs: Number.NaN })), RangeError);
  t.throws(
    () => new ResponseWriter(x.res, options({ maxDurationMs: 2 ** 31 })),
    RangeError,
    'a deadline setTimeout cannot hold',
  );
  const writer = new ResponseWriter(x.res, options({ maxDurationMs: 2 ** 31 - 1 }));
  t.equal(writer.reason, null, 'the longest deadline setTimeout can hold is taken');
  writer.close();
  client.socket.destroy();
});
