import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock, type Clock } from '../../src/clock.js';
import { InstantQueue } from '../../src/worker/instant-queue.js';

const startMs = Date.parse('2026-12-01T12:00:00Z');

/** A queue that records the items it fires. (What it shares with GroupedTimers is tested in grouped-timers.test.ts.) */
function recording<T>(clock: Clock): { queue: InstantQueue<T>; fired: T[] } {
  const fired: T[] = [];
  return { queue: new InstantQueue<T>(clock, (item) => fired.push(item)), fired };
}

test('items fire at their instants, earliest first and in the order added within one, from one clock timer', async () => {
  const clock = new VirtualClock(startMs);
  const { queue, fired } = recording<[string, number]>(clock);
  const add = (atMs: number, name: string): void => queue.add(atMs, [name, atMs]);
  // Added out of time order, as leases that overlap add them.
  add(startMs + 300, 'd');
  add(startMs + 100, 'a');
  add(startMs + 200, 'c');
  add(startMs + 100, 'b');
  add(startMs + 300, 'e');
  assert.equal(clock.pendingTimerCount(), 1, 'one clock timer, whatever the instants');
  assert.equal(queue.size, 5);
  await clock.advance(99);
  assert.deepEqual(fired, []);
  await clock.advance(1);
  // Each item carries its own instant: what fired at +100 is what was due then.
  assert.deepEqual(fired, [['a', startMs + 100], ['b', startMs + 100]]);
  assert.equal(clock.pendingTimerCount(), 1, 're-armed for the next instant');
  await clock.advance(150);
  assert.deepEqual(fired.slice(2), [['c', startMs + 200]]);
  await clock.advance(50);
  assert.deepEqual(fired.slice(3), [['d', startMs + 300], ['e', startMs + 300]]);
  assert.equal(queue.size, 0);
  assert.equal(clock.pendingTimerCount(), 0);
});

test('an item added earlier than the armed instant moves the timer forward; one added later leaves it', async () => {
  const clock = new VirtualClock(startMs);
  const { queue, fired } = recording<string>(clock);
  queue.add(startMs + 500, 'late');
  queue.add(startMs + 50, 'early');
  queue.add(startMs + 900, 'later');
  assert.equal(clock.pendingTimerCount(), 1, 'the replaced timer was cancelled');
  await clock.advance(50);
  assert.deepEqual(fired, ['early']);
  // Added during the wait, due before the armed instant.
  queue.add(startMs + 60, 'meanwhile');
  await clock.advance(10);
  assert.deepEqual(fired, ['early', 'meanwhile']);
  await clock.advance(1_000);
  assert.deepEqual(fired, ['early', 'meanwhile', 'late', 'later']);
});

test('a timer that fires late (a busy event loop) fires every instant already passed, in order', async () => {
  // A clock whose timers run only when the test says, at whatever time it says.
  let nowMs = startMs;
  const armed: { atMs: number; callback: () => unknown; cancelled: boolean }[] = [];
  const clock: Clock = {
    isVirtual: true,
    nowMs: () => nowMs,
    monotonicMs: () => nowMs,
    setTimer: (atMs, callback) => {
      const timer = { atMs, callback, cancelled: false };
      armed.push(timer);
      return { cancel: () => { timer.cancelled = true; } };
    },
  };
  const { queue, fired } = recording<string>(clock);
  queue.add(startMs + 20, 'b');
  queue.add(startMs + 10, 'a');
  queue.add(startMs + 30, 'c');
  queue.add(startMs + 50, 'later');
  const live = armed.filter((timer) => !timer.cancelled);
  assert.deepEqual(live.map((timer) => timer.atMs), [startMs + 10]);
  // The timer for +10 runs only at +40: the queue catches up with +10, +20 and +30, in order.
  nowMs = startMs + 40;
  await live[0]!.callback();
  assert.deepEqual(fired, ['a', 'b', 'c']);
  assert.deepEqual(armed.filter((timer) => !timer.cancelled && timer !== live[0]).map((timer) => timer.atMs), [startMs + 50]);
});

test('ten thousand instants in random order come out sorted', async () => {
  const clock = new VirtualClock(startMs);
  const { queue, fired } = recording<number>(clock);
  let seed = 7;
  const offsets = Array.from({ length: 10_000 }, () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    return seed % 5_000;
  });
  for (const offset of offsets) queue.add(startMs + offset, offset);
  await clock.advance(5_000);
  assert.equal(fired.length, offsets.length);
  assert.deepEqual(fired, [...offsets].sort((a, b) => a - b));
});
