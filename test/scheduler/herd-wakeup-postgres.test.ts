// On PostgreSQL too, a long-poll parked before a herd's runs are written ahead is answered at
// their fire time, not at their jobs' finish (TimingConfig.finishAheadDelayMs later): the
// ahead stage announces its pool (NOTIFY), and the parked waiter arms a timer for the runs'
// ready time. The embedded store's twin is in scheduler.test.ts. Without the announcement
// bench:peers W4 on PostgreSQL measured 16-18 s instead of ~5.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { runIdOf } from '../../src/domain/identity.js';
import { timingDefaults } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { LeaseWaiters } from '../../src/service/lease-waiters.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';
import { openTestStore, postgresSkipReason } from '../store/postgres-harness.js';

const skip = await postgresSkipReason();
const startMs = Date.parse('2026-11-29T00:00:00.000Z');

void describe('a herd written ahead on PostgreSQL', { skip: skip ?? false }, () => {
  void it('a long-poll parked before its runs are written ahead is answered at their fire time', async () => {
    const handle = await openTestStore({ useDatabaseClock: false });
    const clock = new VirtualClock(startMs);
    const scheduler = new Scheduler({
      store: handle.store, clock, metrics: new Metrics(), logger: silentLogger(), nodeId: 'node-a', forceFirstAcquire: false,
      timing: { ...timingDefaults, dispatchAheadMinTimers: 1 }, fullReloadEveryRefreshes: 10,
    });
    const waiters = new LeaseWaiters(handle.store, clock, silentLogger());
    try {
      await scheduler.start();
      const atMs = startMs + 90_000;
      const [outcome] = await handle.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
      // Up to 5 s of real time: the run must come from the virtual clock's advance, not the timeout.
      const parked = waiters.lease({ scope: null, pool: 'default', max: 1, leaseMs: 10_000, workerId: 'w1', aheadMs: 0, waitMs: 5_000 });
      for (let turn = 0; turn < 200 && waiters.waitingCount() === 0; turn++) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(waiters.waitingCount(), 1, 'parked before the run is written ahead');
      // The announcement travels by NOTIFY: arriving before the fire time, it makes the waiter
      // arm a timer for it; arriving after, it makes the waiter lease at once. Either way the
      // waiter is woken by it, and without it by nothing but its timeout.
      await clock.advance(90_000);
      const runs = await parked;
      assert.deepEqual(runs.map((run) => [run.runId, run.readyAtMs]), [[runIdOf(outcome!.job.jobId, atMs), atMs]]);
      assert.equal((await handle.store.getJob(null, outcome!.job.jobId))?.state, 'active', 'leased before its job\'s finish');
    } finally {
      waiters.close();
      await scheduler.stop();
      await handle.cleanup();
    }
  });
});
