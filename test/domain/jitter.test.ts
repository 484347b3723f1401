// Jitter: deterministic per job id, inside [0, window], window = min(tolerance, half the
// smallest gap), zero for tolerance 0; and spread, so a herd on `0 0 * * *` does not collapse.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { jitterOffsetMs, jitterWindowMs } from '../../src/domain/jitter.js';

void test('jitter is deterministic and inside min(tolerance, half the gap)', () => {
  fc.assert(fc.property(
    fc.string({ minLength: 1, maxLength: 40 }),
    fc.integer({ min: 0, max: 86_400 }),
    fc.oneof(fc.integer({ min: 1, max: 10 * 86_400_000 }), fc.constant(Infinity)),
    (jobId, toleranceS, minGapMs) => {
      const offsetMs = jitterOffsetMs(jobId, toleranceS, minGapMs);
      assert.equal(jitterOffsetMs(jobId, toleranceS, minGapMs), offsetMs, 'deterministic');
      assert.ok(Number.isInteger(offsetMs) && offsetMs >= 0);
      assert.ok(offsetMs <= toleranceS * 1_000, 'within tolerance');
      assert.ok(offsetMs <= Math.floor(minGapMs / 2), 'at most half the gap');
      assert.ok(offsetMs <= jitterWindowMs(toleranceS, minGapMs));
      if (toleranceS === 0) assert.equal(offsetMs, 0);
    },
  ), { numRuns: 2_000 });
});

void test('bad tolerances give no jitter rather than NaN', () => {
  for (const toleranceS of [NaN, -5, 0]) assert.equal(jitterOffsetMs('j_1', toleranceS, 60_000), 0);
  assert.equal(jitterOffsetMs('j_1', 300, 0), 0);
  assert.equal(jitterWindowMs(300, 1_000), 500);
  assert.equal(jitterWindowMs(300, Infinity), 300_000);
});

void test('a herd of daily jobs spreads over the whole window', () => {
  const windowMs = 300_000;
  const offsets = Array.from({ length: 10_000 }, (_, index) => jitterOffsetMs(`j_herd_${index}`, 300, 86_400_000));
  const bucketCounts = new Array<number>(10).fill(0);
  for (const offsetMs of offsets) bucketCounts[Math.min(9, Math.floor((offsetMs / windowMs) * 10))]! += 1;
  // Uniform would put 1 000 in each tenth of the window; allow generous slack.
  for (const count of bucketCounts) assert.ok(count > 800 && count < 1_200, `bucket counts ${bucketCounts.join(',')}`);
  assert.ok(new Set(offsets).size > 9_000, 'distinct offsets');
});
