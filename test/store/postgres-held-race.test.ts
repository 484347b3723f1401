// A `buffer_one` run is released by the end of the run before it. On PostgreSQL a completion
// reads the job's overlap, and whether the job holds a run, as of its statement's start: a
// PATCH to `buffer_one` committed while the completion waited for its run's lock, and a
// dispatch that held the next occurrence behind the still-running run meanwhile, leave that
// occurrence held with nothing left to release it (found auditing the PostgreSQL writes for
// statements acting on what they read before a lock wait). The reconciler's pass releases it
// (`Store.releaseStrandedHeldRuns`). Real PostgreSQL; a third connection holds the run's lock
// so that the completion waits while the PATCH and the dispatch commit.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Reconciler } from '../../src/scheduler/reconciler.js';
import { ScheduleCache } from '../../src/scheduler/schedule-cache.js';
import { createJob, firePending, leaseOne, minuteMs, t0Ms } from './conformance-fixtures.js';
import { postgresSkipReason, withRowLockQueue } from './postgres-harness.js';

const skip = await postgresSkipReason();
const firstMs = t0Ms + minuteMs;
const secondMs = firstMs + minuteMs;

void describe('a PATCH to buffer_one racing a completion on PostgreSQL', { skip: skip ?? false }, () => {
  void it('leaves the next occurrence held with nothing to release it, and the reconciler releases it', () =>
    withRowLockQueue(async ({ store }, locks) => {
      const job = await createJob(store, { spec: { overlap: 'allow' } });
      const first = await firePending(store, job, firstMs);
      const leased = (await leaseOne(store, firstMs))!;
      assert.equal(leased.runId, first.runId);
      await locks.lock('runs', first.runId);
      const completing = await locks.queue(() => store.completeRun({
        team: null, runId: first.runId, fencingToken: leased.fencingToken, status: 'succeeded', error: null, result: null,
        nowMs: secondMs,
      }));
      const current = (await store.getJob(null, job.jobId))!;
      const patched = await store.changeJob({ team: null, jobId: job.jobId, expectedVersion: current.version,
        spec: { ...current.spec, overlap: 'buffer_one' }, timer: 'keep', nowMs: secondMs });
      assert.equal(patched.kind, 'changed');
      const second = await firePending(store, job, secondMs);
      assert.ok(second.result.kind === 'dispatched' && second.result.runs[0]?.status === 'ready');
      await locks.release();
      assert.equal((await completing.done).kind, 'completed');
      assert.equal(await leaseOne(store, secondMs), undefined,
        'the completion did not release it: it read the overlap and the held runs as of its start');

      const clock = new VirtualClock(secondMs + minuteMs);
      const metrics = new Metrics();
      const reconciler = new Reconciler({ store, clock, metrics, logger: silentLogger(), schedules: new ScheduleCache(),
        intervalMs: 60_000, isLeader: () => true });
      assert.equal(await reconciler.releaseStrandedOnce(), 1);
      assert.equal((await leaseOne(store, clock.nowMs()))?.runId, second.runId, 'released, leasable');
      assert.deepEqual((await store.getRun(null, second.runId))!.events.map((event) => event.type), ['dispatched', 'released', 'leased']);
      assert.equal((await metrics.reconcilerHeldReleasesTotal.get()).values[0]?.value, 1);
      const third = await firePending(store, job, clock.nowMs());
      assert.ok(third.result.kind === 'dispatched' && third.result.runs[0]?.status === 'ready', 'held behind the second');
      assert.equal(await reconciler.releaseStrandedOnce(), 0, 'a run held behind an active one is left alone');
      assert.equal(await leaseOne(store, clock.nowMs()), undefined);
    }));
});
