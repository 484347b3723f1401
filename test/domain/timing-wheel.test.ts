// The timing wheel against a plain sorted-list model: whatever the inserts, removes and
// advances, the wheel fires exactly the entries the model says are due, in time order, and
// nextDueMs is the model's earliest entry, lastDueBy(limit) its latest entry up to limit, and
// countDueBy(limit) the number of its entries up to limit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { TimingWheel } from '../../src/domain/timing-wheel.js';

type Command =
  | { op: 'insert'; key: number; offsetMs: number }
  | { op: 'remove'; key: number }
  | { op: 'advance'; byMs: number };

const commandArbitrary: fc.Arbitrary<Command> = fc.oneof(
  fc.record({
    op: fc.constant('insert' as const),
    key: fc.integer({ min: 0, max: 40 }),
    // Past, near, across each level boundary, and beyond the last level.
    offsetMs: fc.oneof(
      fc.integer({ min: -5_000, max: 3_000 }),
      fc.integer({ min: 0, max: 200_000 }),
      fc.integer({ min: 0, max: 12_000_000 }),
      fc.integer({ min: 10_000_000, max: 40_000_000 }),
    ),
  }),
  fc.record({ op: fc.constant('remove' as const), key: fc.integer({ min: 0, max: 40 }) }),
  fc.record({
    op: fc.constant('advance' as const),
    byMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 20_000_000 })),
  }),
);

test('the wheel fires what a sorted-list model fires, in order', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2_000_000_000_000 }), fc.array(commandArbitrary, { maxLength: 120 }), (startMs, commands) => {
      const wheel = new TimingWheel<string>({ tickMs: 10, startMs });
      const model = new Map<string, number>();
      let nowMs = startMs;
      for (const command of commands) {
        if (command.op === 'insert') {
          const key = `k${command.key}`;
          wheel.insert(key, nowMs + command.offsetMs, key);
          model.set(key, nowMs + command.offsetMs);
        } else if (command.op === 'remove') {
          const key = `k${command.key}`;
          assert.equal(wheel.remove(key), model.delete(key));
        } else {
          nowMs += command.byMs;
          const fired = wheel.advance(nowMs);
          const expected = [...model.entries()].filter(([, at]) => at <= nowMs).sort((a, b) => a[1] - b[1]);
          assert.deepEqual(new Set(fired), new Set(expected.map(([key]) => key)));
          const firedTimes = fired.map((key) => model.get(key)!);
          assert.deepEqual(firedTimes, [...firedTimes].sort((a, b) => a - b), 'fired in time order');
          for (const [key] of expected) model.delete(key);
        }
        assert.equal(wheel.size, model.size);
        const earliest = model.size === 0 ? null : Math.min(...model.values());
        assert.equal(wheel.nextDueMs(), earliest);
        for (const limitMs of [nowMs - 3_000, nowMs, nowMs + 9, nowMs + 2_600, nowMs + 170_000, nowMs + 11_000_000]) {
          const upTo = [...model.values()].filter((at) => at <= limitMs);
          assert.equal(wheel.lastDueBy(limitMs), upTo.length === 0 ? null : Math.max(...upTo));
          assert.equal(wheel.countDueBy(limitMs), upTo.length);
        }
      }
    }),
    { numRuns: 400 },
  );
});

test('an empty wheel jumps a month of ticks at once', () => {
  const wheel = new TimingWheel<string>({ tickMs: 10, startMs: 0 });
  assert.deepEqual(wheel.advance(30 * 86_400_000), []);
  wheel.insert('a', 30 * 86_400_000 + 5, 'a');
  assert.deepEqual(wheel.advance(30 * 86_400_000 + 4), []);
  assert.deepEqual(wheel.advance(30 * 86_400_000 + 5), ['a']);
});

test('removeWhere drops the entries of a lost shard only', () => {
  const wheel = new TimingWheel<{ shard: number }>({ tickMs: 10, startMs: 0 });
  wheel.insert('a', 100, { shard: 1 });
  wheel.insert('b', 200, { shard: 2 });
  assert.equal(wheel.removeWhere((item) => item.shard === 1), 1);
  assert.deepEqual(wheel.advance(1_000), [{ shard: 2 }]);
});

test('nextDueMs looks at the current upper slot last: it holds a whole turn ahead', () => {
  const wheel = new TimingWheel<string>({ tickMs: 10, startMs: 1_000 });
  wheel.insert('far', 164_000, 'far'); // level 1, same slot index as the current position
  wheel.insert('near', 10_000, 'near'); // level 1, three slots on
  assert.equal(wheel.nextDueMs(), 10_000);
});

test('nextDueMs asks every level: an old upper entry can be nearer than a new lower one', () => {
  const wheel = new TimingWheel<string>({ tickMs: 10, startMs: 0 });
  wheel.insert('upper', 3_000, 'upper'); // placed on level 1 at tick 0
  wheel.advance(2_000);
  wheel.insert('lower', 4_000, 'lower'); // level 0 from tick 200
  assert.equal(wheel.nextDueMs(), 3_000);
});

test('lastDueBy finds the last entry up to its limit, wherever the entries sit', () => {
  const wheel = new TimingWheel<string>({ tickMs: 10, startMs: 0 });
  wheel.insert('upper', 3_004, 'upper'); // level 1 at tick 0
  wheel.advance(2_000);
  wheel.insert('lower', 3_001, 'lower'); // level 0 from tick 200
  wheel.insert('later', 3_010, 'later');
  assert.equal(wheel.nextDueMs(), 3_001);
  assert.equal(wheel.lastDueBy(3_009), 3_004);
  assert.equal(wheel.lastDueBy(3_003), 3_001);
  assert.equal(wheel.lastDueBy(3_000), null);
  assert.deepEqual(wheel.advance(3_004), ['lower', 'upper']);
  assert.equal(wheel.lastDueBy(3_019), 3_010);
});
