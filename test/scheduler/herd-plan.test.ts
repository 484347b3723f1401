// Herd planning (src/scheduler/herd-plan.ts) and catch-up pacing (catch-up-pacing.ts), pure:
// when a timer comes out of the wheel, which store operation fires it, which early timers go
// back to their own time, and the pacing of a `catch_up: all` backlog. Properties over random
// timers and limits (fast-check), with a few examples pinned beside them.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { JobSpec } from '../../src/domain/types.js';
import { timingDefaults, wheelTickMs } from '../../src/limits.js';
import { CatchUpPacer, catchUpSpacingMs, nextCatchUpSlotMs } from '../../src/scheduler/catch-up-pacing.js';
import {
  HerdTally, firingOf, herdLeadMs, isEarlyWork, splitStragglers, tickOf, wheelAtMs, wheelsEarly, type HerdLimits, type HerdTimer,
} from '../../src/scheduler/herd-plan.js';

const oneShotSpec = { schedule: { at: '2026-11-29T02:00:00Z' } } as unknown as JobSpec;
const cronSpec = { schedule: { cron: '* * * * *' } } as unknown as JobSpec;

const limitsArb: fc.Arbitrary<HerdLimits> = fc.record({
  dispatchAheadMs: fc.integer({ min: 0, max: 60_000 }),
  dispatchAheadMinTimers: fc.integer({ min: 1, max: 100 }),
  dispatchAheadTimersPerSecond: fc.integer({ min: 1, max: 10_000 }),
  finishAheadDelayMs: fc.integer({ min: 0, max: 60_000 }),
});
const aheadOnArb = limitsArb.map((limits) => ({ ...limits, dispatchAheadMs: Math.max(limits.dispatchAheadMs, 1) }));
const fireAtArb = fc.integer({ min: 1_000_000, max: 4_000_000_000_000 });
const timerArb: fc.Arbitrary<HerdTimer> = fc.record({
  fireAtMs: fireAtArb,
  spec: fc.constantFrom(oneShotSpec, cronSpec),
  dispatchedAhead: fc.constantFrom(undefined, true),
}).map(({ dispatchedAhead, ...timer }) => (dispatchedAhead === undefined ? timer : { ...timer, dispatchedAhead }));

const defaults: HerdLimits = timingDefaults;

void describe('herd planning', () => {
  void it('wheels an early one-shot tick-aligned, between dispatchAheadMs and twice that before its fire time', () => {
    fc.assert(fc.property(aheadOnArb, fireAtArb, fc.integer({ min: 1, max: 1_000_000 }), (limits, fireAtMs, count) => {
      const atMs = wheelAtMs({ fireAtMs, spec: oneShotSpec }, count, limits);
      assert.equal(atMs % wheelTickMs, 0);
      assert.ok(atMs <= fireAtMs - limits.dispatchAheadMs);
      assert.ok(atMs > fireAtMs - 2 * limits.dispatchAheadMs - wheelTickMs);
    }));
  });

  void it('wheels a herd\'s later members no later than its earlier ones', () => {
    fc.assert(fc.property(aheadOnArb, fireAtArb, fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 0, max: 100_000 }),
      (limits, fireAtMs, count, more) => {
        const timer = { fireAtMs, spec: oneShotSpec };
        assert.ok(wheelAtMs(timer, count + more, limits) <= wheelAtMs(timer, count, limits));
        assert.ok(herdLeadMs(count + more, limits) >= herdLeadMs(count, limits));
      }));
  });

  void it('leads by a second more per dispatchAheadTimersPerSecond in the tick, up to twice dispatchAheadMs', () => {
    assert.equal(herdLeadMs(1, defaults), 10_000);
    assert.equal(herdLeadMs(4_999, defaults), 10_000);
    assert.equal(herdLeadMs(5_000, defaults), 11_000);
    assert.equal(herdLeadMs(25_000, defaults), 15_000);
    assert.equal(herdLeadMs(50_000, defaults), 20_000);
    assert.equal(herdLeadMs(500_000, defaults), 20_000);
  });

  void it('wheels a timer written ahead after its fire time\'s tick, finishAheadDelayMs on; every other timer at its fire time', () => {
    fc.assert(fc.property(limitsArb, timerArb, fc.integer({ min: 0, max: 100_000 }), (limits, timer, count) => {
      const atMs = wheelAtMs(timer, count, limits);
      if (timer.dispatchedAhead === true) {
        assert.equal(atMs, (tickOf(timer.fireAtMs - 1) + 1) * wheelTickMs + limits.finishAheadDelayMs);
        assert.ok(atMs >= timer.fireAtMs + limits.finishAheadDelayMs);
      } else if (!wheelsEarly(timer, limits)) {
        assert.equal(atMs, timer.fireAtMs);
      }
      assert.equal(wheelsEarly(timer, limits),
        limits.dispatchAheadMs > 0 && timer.dispatchedAhead !== true && timer.spec === oneShotSpec);
    }));
  });

  void it('fires a timer written ahead by finishAhead, an early one-shot by writeRunsAhead, every other by dispatch', () => {
    fc.assert(fc.property(limitsArb, timerArb, fc.integer({ min: -100_000, max: 100_000 }), (limits, timer, offsetMs) => {
      const nowMs = timer.fireAtMs + offsetMs;
      const firing = firingOf(timer, nowMs, limits);
      if (timer.dispatchedAhead === true) assert.equal(firing, 'finishAhead');
      else if (limits.dispatchAheadMs > 0 && timer.spec === oneShotSpec && nowMs < timer.fireAtMs) assert.equal(firing, 'writeRunsAhead');
      else assert.equal(firing, 'dispatch');
      // Early work is exactly what is not a run's dispatch at its time.
      if (limits.dispatchAheadMs > 0) assert.equal(isEarlyWork(timer, nowMs), firing !== 'dispatch');
    }));
  });

  void it('sends back to their fire time exactly the early one-shots of ticks below dispatchAheadMinTimers, order kept', () => {
    fc.assert(fc.property(limitsArb, fc.array(timerArb, { maxLength: 40 }), fc.integer({ min: -50_000, max: 50_000 }),
      fc.integer({ min: 0, max: 200 }), (limits, taken, offsetMs, herdSize) => {
        const nowMs = (taken[0]?.fireAtMs ?? 2_000_000) + offsetMs;
        const countOf = (fireAtMs: number): number => (tickOf(fireAtMs) % 2 === 0 ? herdSize : 0);
        const { fire, backToFireTime } = splitStragglers(taken, nowMs, countOf, limits);
        assert.deepEqual([...fire, ...backToFireTime].length, taken.length);
        assert.deepEqual(fire, taken.filter((timer) => !backToFireTime.includes(timer)));
        for (const timer of taken) {
          const straggler = limits.dispatchAheadMs > 0 && timer.dispatchedAhead !== true && timer.spec === oneShotSpec
            && timer.fireAtMs > nowMs && countOf(timer.fireAtMs) < limits.dispatchAheadMinTimers;
          assert.equal(backToFireTime.includes(timer), straggler);
        }
      }));
  });

  void it('writes a whole herd ahead and sends a trickle back: one tick, the tally counting as the loader wheels', () => {
    const fireAtMs = 1_700_000_000_005;
    const herd = new HerdTally();
    const wheeled = Array.from({ length: defaults.dispatchAheadMinTimers }, () => {
      const timer = { fireAtMs, spec: oneShotSpec };
      return { timer, atMs: wheelAtMs(timer, herd.add(timer.fireAtMs), defaults) };
    });
    const nowMs = wheeled[0]!.atMs;
    const split = splitStragglers(wheeled.map((entry) => entry.timer), nowMs, (at) => herd.countOf(at), defaults);
    assert.equal(split.fire.length, defaults.dispatchAheadMinTimers);
    assert.ok(split.fire.every((timer) => firingOf(timer, nowMs, defaults) === 'writeRunsAhead'));

    const trickle = new HerdTally();
    const lone = { fireAtMs, spec: oneShotSpec };
    trickle.add(lone.fireAtMs);
    assert.deepEqual(splitStragglers([lone], nowMs, (at) => trickle.countOf(at), defaults).backToFireTime, [lone]);
    assert.equal(firingOf(lone, fireAtMs, defaults), 'dispatch', 'at its own time it is fired whole');
  });

  void it('tallies per tick, and forgets only the ticks before now\'s', () => {
    fc.assert(fc.property(fc.array(fc.integer({ min: 0, max: 1_000 }), { maxLength: 200 }), fc.integer({ min: 0, max: 1_000 }),
      (fireTimes, nowMs) => {
        const tally = new HerdTally();
        const expected = new Map<number, number>();
        for (const fireAtMs of fireTimes) {
          const count = (expected.get(tickOf(fireAtMs)) ?? 0) + 1;
          expected.set(tickOf(fireAtMs), count);
          assert.equal(tally.add(fireAtMs), count);
        }
        tally.forgetBefore(nowMs);
        for (const fireAtMs of fireTimes) {
          assert.equal(tally.countOf(fireAtMs), tickOf(fireAtMs) < tickOf(nowMs) ? 0 : expected.get(tickOf(fireAtMs)));
        }
      }));
  });
});

void describe('catch-up pacing', () => {
  void it('spaces a backlog at its share of the capacity', () => {
    assert.equal(catchUpSpacingMs(5_000, 0.2), 1);
    assert.equal(catchUpSpacingMs(100, 0.5), 20);
  });

  void it('hands out slots at least the spacing apart, never before now', () => {
    fc.assert(fc.property(fc.double({ min: 0.01, max: 1_000, noNaN: true }),
      fc.array(fc.integer({ min: 0, max: 10_000 }), { minLength: 1, maxLength: 100 }), (spacingMs, steps) => {
        const pacer = new CatchUpPacer(spacingMs);
        let nowMs = 0;
        let lastMs = Number.NEGATIVE_INFINITY;
        for (const step of steps) {
          nowMs += step % 3 === 0 ? 0 : step;
          const slotMs = pacer.nextSlotMs(nowMs);
          assert.ok(slotMs >= nowMs);
          assert.ok(slotMs >= lastMs + spacingMs);
          assert.equal(slotMs, nextCatchUpSlotMs(lastMs === Number.NEGATIVE_INFINITY ? 0 : lastMs, nowMs, spacingMs));
          lastMs = slotMs;
        }
      }));
  });
});
