// The embedded store's two-stage dispatch of a one-shot herd (DispatchItem.stage): what each
// stage writes, and that a stage arriving twice, late, fenced or for the wrong timer writes
// nothing it should not. The scheduler's side (when a stage is chosen, what a change to the
// job in between does) is tested in test/scheduler/scheduler.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runIdOf } from '../../src/domain/identity.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { DispatchItem, Store } from '../../src/store/store.js';
import {
  createJob, dispatchItem, leaseOne, leaseTtlMs, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt,
} from './conformance-fixtures.js';

async function withStore(fn: (store: Store) => Promise<void>): Promise<void> {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-ahead-'));
  const store = await openSqliteStore({ path: join(directory, 'tickler.db') });
  try {
    await fn(store);
  } finally {
    await store.close();
    await rm(directory, { recursive: true, force: true });
  }
}

const dueMs = t0Ms + minuteMs;
const aheadMs = dueMs - 5_000;

/** A one-shot job due at `dueMs`, its shard owned, and the item of each stage for its timer. */
async function oneShot(store: Store) {
  const job = await createJob(store, { timer: timerAt(dueMs) });
  const timer = (await pendingTimerOf(store, job))!;
  const lease = await ownShard(store, job.shard, aheadMs - 1);
  const item = (stage: DispatchItem['stage']): DispatchItem => ({ ...dispatchItem(lease, timer), stage });
  return { job, timer, lease, item, runId: runIdOf(job.jobId, timer.scheduledAtMs) };
}

void describe('sqlite store: dispatching a one-shot timer ahead, in two stages', () => {
  void it('ahead writes the run ready from its fire time and keeps the timer, marked; finish consumes it and ends the job',
    () => withStore(async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      const [ahead] = await store.dispatch([item('ahead')], aheadMs);
      assert.deepEqual(ahead, {
        kind: 'dispatched', timerId: timer.timerId, pool: job.spec.pool, nextTimerId: timer.timerId,
        runs: [{ runId, status: 'ready', inserted: true }], nextTimerDispatchedAhead: true,
      });
      const run = await store.getRun(null, runId);
      assert.equal(run?.readyAtMs, dueMs);
      assert.equal(run.dispatchedAtMs, aheadMs);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, true, 'still pending, marked');
      assert.equal((await store.getJob(null, job.jobId))?.state, 'active');
      assert.equal(await leaseOne(store, dueMs - 1, { pool: job.spec.pool }), undefined, 'not leasable before its time');

      const [finished] = await store.dispatch([item('finish')], dueMs);
      assert.deepEqual(finished, { kind: 'dispatched', timerId: timer.timerId, runs: [], pool: job.spec.pool, nextTimerId: null });
      assert.equal(await pendingTimerOf(store, job), undefined);
      assert.equal((await store.getJob(null, job.jobId))?.state, 'done');
      assert.equal((await leaseOne(store, dueMs, { pool: job.spec.pool }))?.runId, runId);
      assert.deepEqual(await store.dispatch([item('finish')], dueMs + 1), [{ kind: 'timer_gone', timerId: timer.timerId }],
        'a second finish finds nothing');
    }));

  void it('a second ahead of the same timer writes nothing more and says the timer awaits its finish',
    () => withStore(async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      await store.dispatch([item('ahead')], aheadMs);
      const [again] = await store.dispatch([item('ahead')], aheadMs + 10);
      assert.deepEqual(again, {
        kind: 'dispatched', timerId: timer.timerId, pool: job.spec.pool, nextTimerId: timer.timerId, runs: [],
        nextTimerDispatchedAhead: true,
      });
      assert.deepEqual((await store.getRun(null, runId))?.events.map((event) => event.type), ['dispatched']);
    }));

  void it('a finish for a timer whose run was not written ahead consumes nothing, so the timer still fires whole',
    () => withStore(async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      assert.deepEqual(await store.dispatch([item('finish')], dueMs), [{ kind: 'timer_gone', timerId: timer.timerId }]);
      assert.equal((await pendingTimerOf(store, job))?.timerId, timer.timerId, 'still pending');
      assert.equal((await store.getJob(null, job.jobId))?.state, 'active');
      const [whole] = await store.dispatch([item('whole')], dueMs);
      assert.deepEqual(whole?.kind === 'dispatched' && whole.runs, [{ runId, status: 'ready', inserted: true }]);
    }));

  void it('a whole dispatch of a marked timer finishes the job without a second run (dispatching ahead turned off meanwhile)',
    () => withStore(async (store) => {
      const { job, item, runId } = await oneShot(store);
      await store.dispatch([item('ahead')], aheadMs);
      const [whole] = await store.dispatch([item('whole')], dueMs);
      assert.deepEqual(whole?.kind === 'dispatched' && whole.runs, [{ runId, status: 'ready', inserted: false }]);
      assert.equal((await store.getJob(null, job.jobId))?.state, 'done');
      assert.equal((await store.listRuns({ team: null, limit: 10 })).items.length, 1);
    }));

  void it('an ahead with a stale shard token writes nothing: no run, the timer unmarked', () => withStore(async (store) => {
    const { job, timer, item, runId } = await oneShot(store);
    const [taken] = await store.acquireShardLeases('node-b', [job.shard], leaseTtlMs, aheadMs + leaseTtlMs, { force: true });
    assert.ok(taken !== undefined);
    assert.deepEqual(await store.dispatch([item('ahead')], aheadMs + leaseTtlMs + 1), [{ kind: 'stale_token', timerId: timer.timerId }]);
    assert.equal(await store.getRun(null, runId), null);
    assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, undefined);
  }));

  void it('a job with an active run is not written ahead: its timer is kept as it was, for the fire time',
    () => withStore(async (store) => {
      const { job, timer, item, runId } = await oneShot(store);
      assert.equal((await store.triggerJob(null, job.jobId, aheadMs - 1))?.status, 'ready');
      const [kept] = await store.dispatch([item('ahead')], aheadMs);
      assert.deepEqual(kept, {
        kind: 'dispatched', timerId: timer.timerId, pool: job.spec.pool, nextTimerId: timer.timerId, runs: [],
        nextTimerDispatchedAhead: false,
      });
      assert.equal(await store.getRun(null, runId), null);
      assert.equal((await pendingTimerOf(store, job))?.dispatchedAhead, undefined, 'unmarked: fired whole at its time');
    }));
});
