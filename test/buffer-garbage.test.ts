/**
 * BufferGarbage (src/buffer-garbage.ts): a full collection once the Buffers grew by the bound since
 * the last one, never on their total; nothing without V8's `gc`; and with the real one, in a child
 * process started with --expose-gc as the `kb-export` executable is, the dead Buffers are freed.
 */
import { execFileSync } from 'node:child_process';
import t from 'tap';
import { BufferGarbage } from '../src/buffer-garbage.js';

const MB = 1024 * 1024;

/** A BufferGarbage over a settable `arrayBuffers`, whose collections set it to `liveAfter`. */
function fake(growthBytes: number) {
  const state = { now: 0, liveAfter: 0, collected: 0 };
  const garbage = new BufferGarbage({
    growthBytes,
    arrayBuffers: () => state.now,
    collect: () => {
      state.collected++;
      state.now = state.liveAfter;
    },
  });
  return { state, garbage };
}

t.test('collects once the growth reaches the bound, then measures from what lived after it', async (t) => {
  const { state, garbage } = fake(24 * MB);
  state.now = 40 * MB;
  garbage.check();
  t.equal(state.collected, 0, 'the first check only sets the base, however much there is');
  state.now = 63 * MB;
  garbage.check();
  t.equal(state.collected, 0, '23 MB of growth: none');
  state.now = 64 * MB;
  state.liveAfter = 30 * MB;
  garbage.check();
  t.equal(state.collected, 1, '24 MB: one');
  state.now = 53 * MB;
  garbage.check();
  t.equal(state.collected, 1, 'the base is the 30 MB left, not the 40 MB before');
  state.now = 54 * MB;
  garbage.check();
  t.equal(state.collected, 2);
  t.equal(garbage.collections, 2);
});

t.test('a collection V8 made on its own lowers the base', async (t) => {
  const { state, garbage } = fake(24 * MB);
  state.now = 50 * MB;
  garbage.check();
  state.now = 10 * MB;
  garbage.check();
  state.now = 33 * MB;
  garbage.check();
  t.equal(state.collected, 0, 'grown 23 MB from the 10 MB seen, not fallen from 50');
  state.now = 34 * MB;
  garbage.check();
  t.equal(state.collected, 1);
});

t.test('many Buffers in flight at once are not a reason to collect after every batch', async (t) => {
  const { state, garbage } = fake(24 * MB);
  state.liveAfter = 200 * MB;
  state.now = 200 * MB;
  for (let i = 0; i < 100; i++) {
    state.now += MB;
    garbage.check();
  }
  t.equal(state.collected, 4, '100 MB of growth over 200 MB alive: four collections');
});

t.test('the bound is per export streaming: two at once collect at twice the growth', async (t) => {
  const { state, garbage } = fake(24 * MB);
  state.now = 10 * MB;
  state.liveAfter = 10 * MB;
  garbage.check();
  const first = garbage.streaming();
  const second = garbage.streaming();
  state.now = 57 * MB;
  garbage.check();
  t.equal(state.collected, 0, '47 MB of growth with two streaming: none');
  state.now = 58 * MB;
  garbage.check();
  t.equal(state.collected, 1, '48 MB: one');
  second();
  second();
  state.now = 34 * MB;
  garbage.check();
  t.equal(state.collected, 2, 'one left (an end counted once): 24 MB again');
  first();
  state.now = 58 * MB;
  garbage.check();
  t.equal(state.collected, 3, 'none streaming counts as one');
});

t.test('without V8 gc exposed, a check reads nothing and collects nothing', async (t) => {
  let reads = 0;
  const garbage = new BufferGarbage({ collect: undefined, arrayBuffers: () => ++reads * 100 * MB });
  for (let i = 0; i < 3; i++) garbage.check();
  t.equal(reads, 0);
  t.equal(garbage.collections, 0);
});

t.test('with --expose-gc, the real collection frees Buffers that died since the last', async (t) => {
  const module = new URL('../src/buffer-garbage.js', import.meta.url).href;
  // 256 MB in Buffers of 64 KB, each dead as soon as the next is made, as an export's socket reads
  // are; the peak of arrayBuffers with a check after each, and with V8 left to itself (no bound).
  const run = (growthBytes: number) => {
    const script = `
      const { BufferGarbage } = await import(${JSON.stringify(module)});
      const garbage = new BufferGarbage({ growthBytes: ${growthBytes} });
      garbage.check();
      let peak = 0;
      let kept = null;
      for (let i = 0; i < 4096; i++) {
        kept = Buffer.alloc(64 * 1024, i);
        garbage.check();
        peak = Math.max(peak, process.memoryUsage().arrayBuffers);
      }
      process.stdout.write(JSON.stringify({ collections: garbage.collections, peak, kept: kept.length }));
    `;
    const argv = ['--expose-gc', '--input-type=module', '-e', script];
    const env = { ...process.env, NODE_OPTIONS: '' };
    return JSON.parse(execFileSync(process.execPath, argv, { encoding: 'utf8', env })) as {
      collections: number;
      peak: number;
    };
  };
  const bounded = run(4 * MB);
  const alone = run(Number.MAX_SAFE_INTEGER);
  t.equal(alone.collections, 0, 'no bound: none started');
  t.ok(bounded.collections >= 32, `256 MB made, 4 MB a collection: ${bounded.collections} collections`);
  const mb = (n: number) => (n / MB).toFixed(1);
  t.ok(
    bounded.peak < alone.peak / 2,
    `arrayBuffers peaked at ${mb(bounded.peak)} MB, under half of V8's own ${mb(alone.peak)} MB`,
  );
});
