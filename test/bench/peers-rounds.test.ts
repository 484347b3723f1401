import assert from 'node:assert/strict';
import { test } from 'node:test';
import { figure, type WorkloadRun } from '../../bench/peers/results.js';
import { combineRounds, median } from '../../bench/peers/rounds.js';

function round(rate: number, p99: number | null, missed: number, note: string): WorkloadRun {
  return {
    workload: 'W3', system: 'tickler-sqlite', settings: 's', startedAt: '2026-11-29T00:00:00.000Z', durationMs: 1_000,
    figures: [
      figure('handled_per_s', 'handled/s', rate, 'jobs/s', 'higher', 'rate'),
      figure('lag_p99', 'lag p99', p99, 'ms', 'lower', 'lag'),
      figure('not_fired', 'not fired', missed, 'count', 'zero'),
    ],
    notes: [note],
  };
}

test('median: odd counts take the middle, even counts the mean of the middle two', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.throws(() => median([]), RangeError);
});

test('rounds fold into medians; a correctness count takes the worst round; every value is noted', () => {
  const run = combineRounds([round(100, 9, 0, 'a'), round(300, 5, 2, 'b'), round(200, 7, 0, 'c')]
    .map((one) => ({ ...one, notes: ['said every round', ...one.notes] })));
  assert.deepEqual(run.figures.map((item) => [item.key, item.value]), [['handled_per_s', 200], ['lag_p99', 7], ['not_fired', 2]]);
  assert.equal(run.rounds, 3);
  assert.equal(run.durationMs, 3_000);
  assert.match(run.notes[0]!, /median of 3 rounds/);
  assert.match(run.notes[0]!, /handled_per_s 100 \/ 300 \/ 200; lag_p99 9 \/ 5 \/ 7/);
  assert.deepEqual(run.notes.slice(1), ['said every round', 'round 1: a', 'round 2: b', 'round 3: c']);
});

test('a figure missing in any round is unknown, and a failed round fails the row', () => {
  const missing = combineRounds([round(100, null, 0, 'a'), round(300, 5, 0, 'b')]);
  assert.equal(missing.figures.find((item) => item.key === 'lag_p99')!.value, null);
  const failed = combineRounds([round(100, 5, 0, 'a'), { ...round(0, null, 0, 'b'), error: 'boom' }]);
  assert.equal(failed.error, 'boom');
  assert.match(failed.notes[0]!, /round 2 of 2 failed/);
});

test('one round is the run itself', () => {
  const only = round(100, 5, 0, 'a');
  assert.equal(combineRounds([only]), only);
});
