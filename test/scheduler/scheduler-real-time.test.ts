// What only real time shows: a fire pass whose timers are all held back (the local lease
// check failed because the renewal is late) must give the event loop back. Under the virtual
// clock no time passes inside a pass; in real time the held-back timers came due again while
// the pass still ran, the pass never ended, and the renewal that would have let them fire —
// and SIGTERM — never ran (the cluster benchmarks once saw schedulers stuck for 10 minutes).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SystemClock } from '../../src/clock.js';
import { timingDefaults, type TimingConfig } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';

/** Leases granted now stop allowing fires 1 ms later, and the next renewal is a minute away. */
const lateRenewal: TimingConfig = {
  ...timingDefaults, shardLeaseTtlMs: 60_000, shardLeaseSafetyMarginMs: 59_999, shardLeaseRenewIntervalMs: 60_000,
  // One timer due every millisecond, each at its own time: none wheeled early.
  dispatchAheadMs: 0,
};

/**
 * Real time that also moves a millisecond at every reading: a machine so starved of CPU that
 * each lease check costs a millisecond. With a timer due every millisecond, every pass finds
 * more due than the last, and held-back timers come due again 100 ms after.
 */
class StarvedClock extends SystemClock {
  private ticks = 0;

  override nowMs(): number {
    return super.nowMs() + (this.ticks += 1);
  }

  override monotonicMs(): number {
    return super.monotonicMs() + (this.ticks += 1);
  }
}

function macrotask(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

test('a pass that can only hold its timers back yields to the event loop, and the node stops on request', { timeout: 30_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tickler-scheduler-rt-'));
    const store = await openSqliteStore({ path: join(dir, 'tickler.db') });
    const clock = new StarvedClock();
    const metrics = new Metrics();
    try {
      const nowMs = clock.nowMs();
      await store.createJobs(Array.from({ length: 2_000 }, (_, index) =>
        jobInput(jobSpec({ at: new Date(nowMs + index).toISOString() }), nowMs)), nowMs);
      const scheduler = new Scheduler({
        store, clock, metrics, timing: lateRenewal, logger: silentLogger(), nodeId: 'node-a', forceFirstAcquire: false,
        fullReloadEveryRefreshes: 10,
      });
      await scheduler.start();
      const heldBack = async (): Promise<number> => {
        const metric = (await metrics.registry.getMetricsAsJSON())
          .find((entry) => entry.name === 'tickler_dispatch_skipped_local_lease_expired_total');
        return (metric?.values ?? []).reduce((sum, value) => sum + Number(value.value), 0);
      };
      // Each turn of this loop is a macrotask: a pass that never yields starves it, and the
      // test's own timeout fails it.
      while ((await heldBack()) === 0) await macrotask();
      const firstHeld = await heldBack();
      const seenAtMs = performance.now();
      while (performance.now() < seenAtMs + 300) await macrotask();
      assert.ok((await heldBack()) > firstHeld, 'held-back timers are retried, pass after pass');
      assert.equal(scheduler.status().shardsOwned, 1024, 'the shards are still held: only firing is paused');
      await scheduler.stop();
      assert.equal((await store.listRuns({ team: null, limit: 10 })).items.length, 0, 'nothing fired past the local deadline');
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

/** Real time that remembers every instant a timer was armed for. */
class ArmRecordingClock extends SystemClock {
  readonly armedAtMs: number[] = [];

  override setTimer(atMs: number, callback: () => void | Promise<void>): ReturnType<SystemClock['setTimer']> {
    this.armedAtMs.push(atMs);
    return super.setTimer(atMs, callback);
  }
}

test('in real time the wake is armed for the earliest timer itself, not for the last one of its wheel tick', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-scheduler-rt-'));
  const store = await openSqliteStore({ path: join(dir, 'tickler.db') });
  const clock = new ArmRecordingClock();
  try {
    const nowMs = clock.nowMs();
    // Two timers in one 10 ms wheel tick, 100 s ahead: inside the load horizon (300 s), past
    // every periodic timer a starting node arms (the longest, reconciliation, at 60 s), and
    // never waited for.
    const tickStartMs = Math.ceil((nowMs + 100_000) / 10) * 10;
    await store.createJobs([tickStartMs + 3, tickStartMs + 8].map((atMs) =>
      jobInput(jobSpec({ at: new Date(atMs).toISOString() }), nowMs)), nowMs);
    const scheduler = new Scheduler({
      // The wake of a timer fired at its time (a one-shot's ahead stage is wheeled earlier, as precisely).
      store, clock, metrics: new Metrics(), timing: { ...timingDefaults, dispatchAheadMs: 0 }, logger: silentLogger(), nodeId: 'node-a',
      forceFirstAcquire: false, fullReloadEveryRefreshes: 10,
    });
    await scheduler.start();
    try {
      const wakes = clock.armedAtMs.filter((atMs) => atMs >= tickStartMs && atMs < tickStartMs + 10);
      // A wake at the tick's last timer would be 5 ms late for the first.
      assert.deepEqual(wakes, [tickStartMs + 3]);
    } finally {
      await scheduler.stop();
    }
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
