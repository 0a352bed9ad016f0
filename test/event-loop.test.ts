/** EventLoopSlices (decisions.md D8.8): no promise while a slice has time left; a real yield once it is due. */
import t from 'tap';
import { EventLoopSlices } from '../src/event-loop.js';

t.test('pause() is undefined within the slice, so a loop over rows awaits nothing', async (t) => {
  const slices = new EventLoopSlices(60_000);
  t.equal(slices.due, false);
  t.equal(slices.pause(), undefined);
});

t.test('once due, pause() yields to the event loop and starts a new slice', async (t) => {
  const slices = new EventLoopSlices(200);
  const until = Date.now() + 220;
  while (Date.now() < until);
  t.equal(slices.due, true);
  let ran = false;
  setImmediate(() => (ran = true));
  const paused = slices.pause();
  t.type(paused, Promise);
  await paused;
  t.equal(ran, true, 'an immediate queued before the pause ran first');
  t.equal(slices.due, false, 'a new slice began');
  t.equal(slices.pause(), undefined);
});
