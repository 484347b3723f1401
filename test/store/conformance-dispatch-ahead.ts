// Conformance: a one-shot timer fired in two calls, `Store.writeRunsAhead` then
// `Store.finishAhead`, on every store. What each writes; that a call arriving twice, late,
// fenced or for the wrong timer writes nothing it should not; that the finish serves parked
// waiters in its transaction; and that a change to the job before the run comes due (cancel,
// batch and prefix cancel, PATCH to another time, PATCH keeping the occurrence) takes the run
// back or moves it in the same transaction. The scheduler's side (which operation fires a
// timer) is tested in test/scheduler/herd-plan.test.ts and test/scheduler/scheduler.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runIdOf } from '../../src/domain/identity.js';
import type { JobSpec } from '../../src/domain/types.js';
import { leaseCameBackShort, type LeasedRun, type ParkedWaiterClaim, type Store } from '../../src/store/store.js';
import {
  createJob, dispatchItem, jobSpec, leaseOne, leaseTtlMs, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt, withStore,
  type OpenStore,
} from './conformance-fixtures.js';

const dueMs = t0Ms + minuteMs;
const aheadMs = dueMs - 5_000;

/** A one-shot job due at `dueMs`, its shard owned, and the item that fires its timer (for any of the three calls). */
async function oneShot(store: Store, spec: Partial<JobSpec> = {}) {
  const job = await createJob(store, { timer: timerAt(dueMs), spec });
  const timer = (await pendingTimerOf(store, job))!;
  const lease = await ownShard(store, job.shard, aheadMs - 1);
  return { job, timer, lease, item: dispatchItem(lease, timer), runId: runIdOf(job.jobId, timer.scheduledAtMs) };
}

export function runDispatchAheadConformance(open: OpenStore): void {
  void describe('writing a one-shot timer\'s run ahead, then finishing it', () => runStageTests(open));
  void describe('a change before the run written ahead comes due', () => runChangeTests(open));
  void describe('leasing ahead of the ready time (aheadMs)', () => runLeaseAheadTests(open));
}

function runStageTests(open: OpenStore): void {
  void it('writeRunsAhead writes the run ready from its fire time and keeps the timer, marked; finishAhead consumes it and ends the job',
    () => withStore(open, async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      const [ahead] = await store.writeRunsAhead([item], aheadMs);
      assert.deepEqual(ahead, { kind: 'written_ahead', timerId: timer.timerId, runs: [{ runId, status: 'ready', inserted: true }] });
      const run = await store.getRun(null, runId);
      assert.equal(run?.readyAtMs, dueMs);
      assert.equal(run.dispatchedAtMs, aheadMs);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, true, 'still pending, marked');
      assert.equal((await store.getJob(null, job.jobId))?.state, 'active');
      assert.equal(await leaseOne(store, dueMs - 1, { pool: job.spec.pool }), undefined, 'not leasable before its time');

      const [finished] = await store.finishAhead([item], dueMs);
      assert.deepEqual(finished, { kind: 'finished', timerId: timer.timerId });
      assert.equal(await pendingTimerOf(store, job), undefined);
      assert.equal((await store.getJob(null, job.jobId))?.state, 'done');
      assert.equal((await leaseOne(store, dueMs, { pool: job.spec.pool }))?.runId, runId);
      assert.deepEqual(await store.finishAhead([item], dueMs + 1), [{ kind: 'timer_gone', timerId: timer.timerId }],
        'a second finish finds nothing');
    }));

  void it('a second writeRunsAhead of the same timer writes nothing more and says the timer awaits its finish',
    () => withStore(open, async (store) => {
      const { timer, item, runId } = await oneShot(store);
      await store.writeRunsAhead([item], aheadMs);
      const [again] = await store.writeRunsAhead([item], aheadMs + 10);
      assert.deepEqual(again, { kind: 'written_ahead', timerId: timer.timerId, runs: [] });
      assert.deepEqual((await store.getRun(null, runId))?.events.map((event) => event.type), ['dispatched']);
    }));

  void it('a finish for a timer whose run was not written ahead consumes nothing, so the timer still fires whole',
    () => withStore(open, async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      assert.deepEqual(await store.finishAhead([item], dueMs), [{ kind: 'timer_gone', timerId: timer.timerId }]);
      assert.equal((await pendingTimerOf(store, job))?.timerId, timer.timerId, 'still pending');
      assert.equal((await store.getJob(null, job.jobId))?.state, 'active');
      const [whole] = await store.dispatch([item], dueMs);
      assert.deepEqual(whole?.kind === 'dispatched' && whole.runs, [{ runId, status: 'ready', inserted: true }]);
    }));

  void it('a whole dispatch of a marked timer finishes the job without a second run (dispatching ahead turned off meanwhile)',
    () => withStore(open, async (store) => {
      const { job, item, runId } = await oneShot(store);
      await store.writeRunsAhead([item], aheadMs);
      const [whole] = await store.dispatch([item], dueMs);
      assert.deepEqual(whole?.kind === 'dispatched' && whole.runs, [{ runId, status: 'ready', inserted: false }]);
      assert.equal((await store.getJob(null, job.jobId))?.state, 'done');
      assert.equal((await store.listRuns({ team: null, limit: 10 })).items.length, 1);
    }));

  void it('a writeRunsAhead with a stale shard token writes nothing: no run, the timer unmarked', () => withStore(open, async (store) => {
    const { job, timer, item, runId } = await oneShot(store);
    const [taken] = await store.acquireShardLeases('node-b', [job.shard], leaseTtlMs, aheadMs + leaseTtlMs, { force: true });
    assert.ok(taken !== undefined);
    assert.deepEqual(await store.writeRunsAhead([item], aheadMs + leaseTtlMs + 1), [{ kind: 'stale_token', timerId: timer.timerId }]);
    assert.equal(await store.getRun(null, runId), null);
    assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, undefined);
  }));

  void it('a finishAhead with a stale shard token writes nothing: the timer still pending, the job active',
    () => withStore(open, async (store) => {
      const { job, timer, item } = await writtenAhead(store);
      const [taken] = await store.acquireShardLeases('node-b', [job.shard], leaseTtlMs, dueMs, { force: true });
      assert.ok(taken !== undefined);
      assert.deepEqual(await store.finishAhead([item], dueMs + 1), [{ kind: 'stale_token', timerId: timer.timerId }]);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, true);
      assert.equal((await store.getJob(null, job.jobId))?.state, 'active');
      assert.deepEqual(await store.finishAhead([{ ...item, shardToken: taken.token }], dueMs + 2),
        [{ kind: 'finished', timerId: timer.timerId }], 'the new owner finishes it');
    }));

  void it('a writeRunsAhead for a job no longer active writes nothing and consumes its timer', () => withStore(open, async (store) => {
    const { job, timer, item, runId } = await oneShot(store);
    await store.cancelJob(null, job.jobId, aheadMs - 1);
    assert.deepEqual(await store.writeRunsAhead([item], aheadMs), [{ kind: 'timer_gone', timerId: timer.timerId }]);
    assert.equal(await store.getRun(null, runId), null);
    assert.equal(await pendingTimerOf(store, job), undefined);
  }));

  void it('finishAhead leases the runs coming due to parked waiters in its own transaction', () => withStore(open, async (store) => {
    const { job, item, runId } = await writtenAhead(store);
    const settled: string[][] = [];
    let claims = 0;
    store.setParkedWaiters?.((pool, nowMs) => {
      if (claims > 0 || pool !== job.spec.pool) return null;
      claims++;
      const claim: ParkedWaiterClaim = {
        request: { team: null, pool, max: 1, leaseMs: 30_000, workerId: 'parked', nowMs },
        settle: (runs: LeasedRun[]) => settled.push(runs.map((run) => run.runId)),
      };
      return claim;
    });
    try {
      await store.finishAhead([item], dueMs);
      assert.deepEqual(settled, [[runId]]);
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'running');
      assert.equal(run.workerId, 'parked');
    } finally {
      store.setParkedWaiters?.(null);
    }
  }));

  void it('a job with an active run is not written ahead: its timer is kept as it was, for the fire time',
    () => withStore(open, async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      assert.equal((await store.triggerJob(null, job.jobId, aheadMs - 1))?.status, 'ready');
      const [kept] = await store.writeRunsAhead([item], aheadMs);
      assert.deepEqual(kept, { kind: 'left_for_fire_time', timerId: timer.timerId });
      assert.equal(await store.getRun(null, runId), null);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, undefined, 'unmarked: fired whole at its time');
    }));
}

const cancelledReason = 'the job was cancelled before the run came due';
const changedReason = 'the job was changed before the run came due';
const beforeDueMs = aheadMs + 1_000;

/** A one-shot job whose run was written ahead at `aheadMs`. */
async function writtenAhead(store: Store, spec: Parameters<typeof oneShot>[1] = {}) {
  const shot = await oneShot(store, spec);
  const [ahead] = await store.writeRunsAhead([shot.item], aheadMs);
  assert.equal(ahead?.kind === 'written_ahead' && ahead.runs.length, 1);
  return shot;
}

/** The run's events as [type, detail], in order. */
async function eventsOf(store: Store, runId: string): Promise<[string, unknown][]> {
  return (await store.getRun(null, runId))?.events.map((event) => [event.type, event.detail]) ?? [];
}

function runChangeTests(open: OpenStore): void {
  void it('a cancel takes the run back: cancelled with the reason, never leased, and its finish finds nothing',
    () => withStore(open, async (store) => {
      const { job, timer, item, runId } = await writtenAhead(store);
      assert.equal((await store.cancelJob(null, job.jobId, beforeDueMs))?.state, 'cancelled');
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'cancelled');
      assert.equal(run.finishedAtMs, beforeDueMs);
      assert.deepEqual((await eventsOf(store, runId)).slice(1), [['cancelled', { reason: cancelledReason }]]);
      assert.equal(await pendingTimerOf(store, job), undefined);
      assert.deepEqual(await store.finishAhead([item], dueMs), [{ kind: 'timer_gone', timerId: timer.timerId }]);
      assert.equal(await leaseOne(store, dueMs, { pool: job.spec.pool }), undefined);
    }));

  void it('a batch cancel and a cancel by key prefix take back the runs written ahead of the jobs they cancel',
    () => withStore(open, async (store) => {
      const first = await writtenAhead(store, { key: 'cart/1' });
      const second = await writtenAhead(store, { key: 'cart/2' });
      const other = await writtenAhead(store, { key: 'order/1' });
      const plain = await oneShot(store, { key: 'cart/3' });
      const cancelled = await store.cancelJobs(null, [first.job.jobId, plain.job.jobId], beforeDueMs);
      assert.deepEqual(cancelled.map((job) => job?.state), ['cancelled', 'cancelled']);
      assert.equal(await store.cancelJobsByKeyPrefix(first.job.team, 'cart/', beforeDueMs + 1), 1, 'only cart/2 was left');
      assert.equal((await store.getRun(null, first.runId))?.status, 'cancelled');
      assert.deepEqual((await eventsOf(store, second.runId)).slice(1), [['cancelled', { reason: cancelledReason }]]);
      assert.equal((await store.getRun(null, plain.runId)), null, 'a job not written ahead has no run to take back');
      assert.equal((await store.getRun(null, other.runId))?.status, 'ready', 'another prefix is untouched');
      assert.equal((await leaseOne(store, dueMs, { pool: other.job.spec.pool }))?.runId, other.runId);
    }));

  void it('a cancel once the run is due leaves it: a past occurrence, leased as usual', () => withStore(open, async (store) => {
    const { job, runId } = await writtenAhead(store);
    await store.cancelJob(null, job.jobId, dueMs);
    assert.deepEqual((await eventsOf(store, runId)).map(([type]) => type), ['dispatched']);
    assert.equal((await leaseOne(store, dueMs, { pool: job.spec.pool }))?.runId, runId);
  }));

  void it('a PATCH to another time takes the run back; the new timer is not marked and fires whole',
    () => withStore(open, async (store) => {
      const { job, lease, runId } = await writtenAhead(store);
      const laterMs = dueMs + minuteMs;
      const changed = await store.changeJob({
        team: null, jobId: job.jobId, expectedVersion: job.version, timer: timerAt(laterMs), nowMs: beforeDueMs,
      });
      assert.equal(changed.kind, 'changed');
      assert.deepEqual((await eventsOf(store, runId)).slice(1), [['cancelled', { reason: changedReason }]]);
      const timer = (await pendingTimerOf(store, job))!;
      assert.equal(timer.fireAtMs, laterMs);
      assert.equal(timer.dispatchedAhead, undefined);
      const [whole] = await store.dispatch([dispatchItem(lease, timer)], laterMs);
      assert.deepEqual(whole?.kind === 'dispatched' && whole.runs,
        [{ runId: runIdOf(job.jobId, laterMs), status: 'ready', inserted: true }]);
    }));

  void it('a pause takes the run back', () => withStore(open, async (store) => {
    const { job, runId } = await writtenAhead(store);
    const paused = await store.changeJob({
      team: null, jobId: job.jobId, expectedVersion: job.version, state: 'paused', timer: null, nowMs: beforeDueMs,
    });
    assert.equal(paused.kind === 'changed' && paused.job.state, 'paused');
    assert.equal((await store.getRun(null, runId))?.status, 'cancelled');
    assert.equal(await pendingTimerOf(store, job), undefined);
  }));

  void it('a PATCH keeping the occurrence moves the run to the new pool and lane; the timer stays marked',
    () => withStore(open, async (store) => {
      const { job, item, runId } = await writtenAhead(store);
      const spec = jobSpec({ ...job.spec, pool: 'pool-b', lane: 'P0' });
      const changed = await store.changeJob({
        team: null, jobId: job.jobId, expectedVersion: job.version, spec, timer: 'keep', nowMs: beforeDueMs,
      });
      assert.equal(changed.kind, 'changed');
      assert.deepEqual((await eventsOf(store, runId)).slice(1),
        [['changed', { reason: changedReason, fire_at: dueMs, pool: 'pool-b', lane: 'P0' }]]);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, true);
      const [finished] = await store.finishAhead([item], dueMs);
      assert.equal(finished?.kind, 'finished');
      assert.equal(await leaseOne(store, dueMs, { pool: 'pool-a' }), undefined);
      const leased = await leaseOne(store, dueMs, { pool: 'pool-b' });
      assert.equal(leased?.runId, runId);
      assert.equal((await store.getRun(null, runId))?.lane, 'P0');
    }));

  void it('a PATCH of the same occurrence to a later fire time moves the run there and marks the new timer',
    () => withStore(open, async (store) => {
      const { job, lease, runId } = await writtenAhead(store);
      const fireAtMs = dueMs + 30_000;
      const changed = await store.changeJob({
        team: null, jobId: job.jobId, expectedVersion: job.version, timer: { scheduledAtMs: dueMs, fireAtMs },
        nowMs: beforeDueMs,
      });
      assert.equal(changed.kind, 'changed');
      const run = await store.getRun(null, runId);
      assert.deepEqual([run?.status, run?.fireAtMs, run?.readyAtMs], ['ready', fireAtMs, fireAtMs]);
      const timer = (await pendingTimerOf(store, job))!;
      assert.deepEqual([timer.fireAtMs, timer.dispatchedAhead], [fireAtMs, true]);
      assert.equal(await leaseOne(store, dueMs, { pool: job.spec.pool }), undefined, 'not due at the old time');
      const [finished] = await store.finishAhead([dispatchItem(lease, timer)], fireAtMs);
      assert.deepEqual(finished, { kind: 'finished', timerId: timer.timerId });
      assert.equal((await store.getJob(null, job.jobId))?.state, 'done');
      assert.equal((await leaseOne(store, fireAtMs, { pool: job.spec.pool }))?.runId, runId);
    }));
}

function runLeaseAheadTests(open: OpenStore): void {
  void it('takes a run written ahead once its ready time is within the window; the lease runs from that time',
    () => withStore(open, async (store) => {
      const { job, runId } = await writtenAhead(store);
      const pool = job.spec.pool;
      assert.equal(await leaseOne(store, dueMs - 51, { pool, aheadMs: 50 }), undefined, 'not yet within 50 ms');
      assert.equal(await leaseOne(store, dueMs - 50, { pool }), undefined, 'not without aheadMs');
      const leased = await leaseOne(store, dueMs - 50, { pool, aheadMs: 50, leaseMs: 30_000 });
      assert.equal(leased?.runId, runId);
      assert.equal(leased.readyAtMs, dueMs, 'the worker starts it at its ready time');
      assert.equal(leased.leaseExpiresAtMs, dueMs + 30_000, 'the lease is counted from the ready time');
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'running');
      assert.deepEqual(run.events.at(-1)?.detail, { attempt: 1, workerId: 'worker-1', readyAt: dueMs });
    }));

  void it('a run ready now is leased as usual whatever aheadMs says: no readyAt, the lease from now',
    () => withStore(open, async (store) => {
      const { job, runId } = await writtenAhead(store);
      const leased = await leaseOne(store, dueMs + 7, { pool: job.spec.pool, aheadMs: 1_000, leaseMs: 30_000 });
      assert.equal(leased?.runId, runId);
      assert.equal(leased.readyAtMs, dueMs);
      assert.equal(leased.leaseExpiresAtMs, dueMs + 7 + 30_000);
      assert.deepEqual((await store.getRun(null, runId))?.events.at(-1)?.detail, { attempt: 1, workerId: 'worker-1' });
    }));

  void it('readyMax: ready runs up to it, the rest of max only runs within the window; short means both ran out',
    () => withStore(open, async (store) => {
      const ahead = [await writtenAhead(store), await writtenAhead(store), await writtenAhead(store)];
      const pool = ahead[0]!.job.spec.pool;
      const ready = [];
      for (let index = 0; index < 3; index++) {
        const job = await createJob(store, { spec: { pool } });
        ready.push((await store.triggerJob(null, job.jobId, dueMs - 100 + index))!.runId);
      }
      const request = (nowMs: number, max: number, readyMax: number) => ({
        team: null, pool, max, readyMax, leaseMs: null, workerId: 'worker-1', nowMs, aheadMs: 1_000,
      });
      const first = request(dueMs - 50, 4, 1);
      const firstRuns = await store.leaseRuns(first);
      assert.equal(firstRuns[0]?.runId, ready[0], 'one ready run (the cap), the oldest');
      assert.deepEqual(firstRuns.slice(1).map((run) => run.runId).sort(), ahead.map((shot) => shot.runId).sort(),
        'then the runs ready within the window');
      assert.equal(leaseCameBackShort(first, firstRuns), false, 'full');
      const second = request(dueMs - 40, 4, 1);
      const secondRuns = await store.leaseRuns(second);
      assert.deepEqual(secondRuns.map((run) => run.runId), [ready[1]], 'no run left ahead; one ready, the cap');
      assert.equal(leaseCameBackShort(second, secondRuns), false, 'ready runs refused for the cap may remain');
      const third = request(dueMs - 30, 4, 3);
      const thirdRuns = await store.leaseRuns(third);
      assert.deepEqual(thirdRuns.map((run) => run.runId), [ready[2]]);
      assert.equal(leaseCameBackShort(third, thirdRuns), true, 'fewer than max and fewer ready than readyMax');
    }));

  void it('readyMax without aheadMs caps the lease', () => withStore(open, async (store) => {
    const pool = 'capped';
    for (let index = 0; index < 3; index++) {
      const job = await createJob(store, { spec: { pool } });
      await store.triggerJob(null, job.jobId, dueMs);
    }
    const runs = await store.leaseRuns({ team: null, pool, max: 3, readyMax: 2, leaseMs: null, workerId: 'w', nowMs: dueMs + 1 });
    assert.equal(runs.length, 2);
  }));

  void it('a cancel after the run was leased ahead cancels the job but leaves the run with its worker',
    () => withStore(open, async (store) => {
      const { job, runId } = await writtenAhead(store);
      const leased = await leaseOne(store, dueMs - 40, { pool: job.spec.pool, aheadMs: 50 });
      assert.equal(leased?.runId, runId);
      assert.equal((await store.cancelJob(null, job.jobId, dueMs - 20))?.state, 'cancelled');
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'running', 'the worker holds it: it will start at its time');
      assert.deepEqual(run.events.map((event) => event.type), ['dispatched', 'leased']);
    }));
}
