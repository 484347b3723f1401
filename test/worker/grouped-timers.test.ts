import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock } from '../../src/clock.js';
import { GroupedTimers } from '../../src/worker/grouped-timers.js';
import { InstantQueue } from '../../src/worker/instant-queue.js';

const startMs = Date.parse('2026-11-30T12:00:00Z');

test('items due at one instant share one clock timer and fire in the order they were added', async () => {
  const clock = new VirtualClock(startMs);
  const fired: [string, number][] = [];
  const timers = new GroupedTimers<string>(clock, (item) => {
    fired.push([item, clock.nowMs()]);
  });
  for (const item of ['a', 'b', 'c']) timers.add(startMs + 100, item);
  timers.add(startMs + 200, 'd');
  assert.equal(clock.pendingTimerCount(), 2, 'one timer per instant');
  assert.equal(timers.instantCount, 2);
  await clock.advance(99);
  assert.deepEqual(fired, []);
  await clock.advance(1);
  assert.deepEqual(fired, [['a', startMs + 100], ['b', startMs + 100], ['c', startMs + 100]]);
  await clock.advance(100);
  assert.deepEqual(fired.at(-1), ['d', startMs + 200]);
  assert.equal(timers.instantCount, 0);
});

test('a deleted item does not fire; the instant\'s timer goes with its last item; deleting after the fire does nothing', async () => {
  const clock = new VirtualClock(startMs);
  const fired: string[] = [];
  const timers = new GroupedTimers<string>(clock, (item) => {
    fired.push(item);
  });
  timers.add(startMs + 50, 'kept');
  timers.add(startMs + 50, 'dropped');
  timers.add(startMs + 70, 'alone');
  timers.delete(startMs + 50, 'dropped');
  timers.delete(startMs + 70, 'alone');
  assert.equal(clock.pendingTimerCount(), 1, 'the instant left empty has no timer');
  timers.delete(startMs + 50, 'never added');
  await clock.advance(100);
  assert.deepEqual(fired, ['kept']);
  timers.delete(startMs + 50, 'kept');
  assert.equal(clock.pendingTimerCount(), 0);
});

// What GroupedTimers and InstantQueue (the worker's held runs) share.
for (const [name, make] of [
  ['GroupedTimers', <T>(clock: VirtualClock, fire: (item: T) => unknown) => new GroupedTimers<T>(clock, fire)],
  ['InstantQueue', <T>(clock: VirtualClock, fire: (item: T) => unknown) => new InstantQueue<T>(clock, fire)],
] as const) {
  test(`${name}: the clock awaits every item of the instant`, async () => {
    const clock = new VirtualClock(startMs);
    const done: string[] = [];
    const timers = make<string>(clock, async (item) => {
      await new Promise((resolve) => setImmediate(resolve));
      done.push(item);
    });
    timers.add(startMs + 10, 'x');
    timers.add(startMs + 10, 'y');
    await clock.advance(10);
    assert.deepEqual(done, ['x', 'y']);
  });

  test(`${name}: fireAll fires every item at once, whatever its instant, and leaves no timer`, async () => {
    const clock = new VirtualClock(startMs);
    const fired: string[] = [];
    const timers = make<string>(clock, (item) => {
      fired.push(item);
    });
    timers.add(startMs + 100, 'a');
    timers.add(startMs + 900, 'b');
    await timers.fireAll();
    assert.deepEqual(fired, ['a', 'b']);
    assert.equal(clock.pendingTimerCount(), 0);
    await clock.advance(1_000);
    assert.deepEqual(fired, ['a', 'b'], 'nothing fires twice');
  });
}
