// A cancel that waits for a job's row lock while a dispatch writes the job's run ahead must
// take that run back once the dispatch commits (invariant 7: a cancelled job never fires).
// Under READ COMMITTED a statement that waited for a row lock reads the locked row's new
// version but every other table as of its start: a one-statement cancel found the job naming
// its run written ahead, yet not the run, and the run fired at its time (bench:peers W5 on
// PostgreSQL once saw 64 jobs cancelled before their due time fire anyway).
// The same holds for the next timer a dispatch of a recurring job writes while the cancel
// waits: the cancel must delete it. Real PostgreSQL; a third connection holds the job's lock
// so that the dispatch and the cancel queue behind it in that order.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runIdOf } from '../../src/domain/identity.js';
import type { JobRecord } from '../../src/domain/types.js';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import { createJob, dispatchItem, leaseOne, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt } from './conformance-fixtures.js';
import { postgresSkipReason, withRowLockQueue } from './postgres-harness.js';

const skip = await postgresSkipReason();
const dueMs = t0Ms + minuteMs;
const aheadMs = dueMs - 10_000;

void describe('a cancel racing a dispatch on PostgreSQL', { skip: skip ?? false }, () => {
  const cancels: [string, (store: PostgresStore, job: JobRecord, nowMs: number) => Promise<unknown>][] = [
    ['a cancel of jobs by id', (store, job, nowMs) => store.cancelJobs(null, [job.jobId], nowMs)],
    ['a cancel by key prefix', (store, job, nowMs) => store.cancelJobsByKeyPrefix(job.team, 'cart/', nowMs)],
  ];
  for (const [name, cancel] of cancels) {
    void it(`${name} takes back the run the dispatch wrote while the cancel waited for the job's lock`, () =>
      withRowLockQueue(async ({ store }, locks) => {
        const job = await createJob(store, { timer: timerAt(dueMs), spec: { key: 'cart/1' } });
        const timer = (await pendingTimerOf(store, job))!;
        const shard = await ownShard(store, job.shard, aheadMs - 1);
        await locks.lock('jobs', job.jobId);
        const dispatching = await locks.queue(() => store.writeRunsAhead([dispatchItem(shard, timer)], aheadMs));
        const cancelling = await locks.queue(() => cancel(store, job, aheadMs + 1));
        await locks.release();

        const [dispatched] = await dispatching.done;
        assert.equal(dispatched?.kind === 'written_ahead' && dispatched.runs.length, 1, 'the dispatch got the lock first and wrote the run');
        await cancelling.done;
        assert.equal((await store.getJob(null, job.jobId))?.state, 'cancelled');
        const run = await store.getRun(null, runIdOf(job.jobId, timer.scheduledAtMs));
        assert.equal(run?.status, 'cancelled', 'the run written while the cancel waited is taken back');
        assert.equal(await leaseOne(store, dueMs, { pool: job.spec.pool }), undefined, 'nothing to lease at its time');
      }));

    // The same trap with a recurring job: the dispatch consumed the timer and wrote the next
    // one, which the cancel found named on the job but could not see in timers to delete. The
    // timer outlived its cancelled job (loaded by every wheel, its day's partition never dropped).
    void it(`${name} deletes the next timer the dispatch wrote while the cancel waited for the job's lock`, () =>
      withRowLockQueue(async ({ store }, locks) => {
        const job = await createJob(store, { timer: timerAt(dueMs), spec: { key: 'cart/1' } });
        const timer = (await pendingTimerOf(store, job))!;
        const shard = await ownShard(store, job.shard, dueMs);
        await locks.lock('jobs', job.jobId);
        const dispatching = await locks.queue(() =>
          store.dispatch([dispatchItem(shard, timer, { nextTimer: timerAt(dueMs + minuteMs) })], dueMs));
        const cancelling = await locks.queue(() => cancel(store, job, dueMs + 1));
        await locks.release();

        const [dispatched] = await dispatching.done;
        assert.ok(dispatched?.kind === 'dispatched' && dispatched.nextTimerId !== null, 'the dispatch got the lock first and wrote the next timer');
        await cancelling.done;
        assert.equal((await store.getJob(null, job.jobId))?.state, 'cancelled');
        assert.equal(await pendingTimerOf(store, job), undefined, 'the timer written while the cancel waited is deleted');
      }));
  }

  // A cancel of a job already cancelled answers the job as it is; one that waited for the
  // lock of the cancel before it answered the job as of its own start: active, at the old
  // version, to a caller whose job was cancelled.
  void it('a cancel that waited for the lock of another cancel of the job answers the job cancelled', () =>
    withRowLockQueue(async ({ store }, locks) => {
      const job = await createJob(store, { timer: timerAt(dueMs) });
      await locks.lock('jobs', job.jobId);
      const first = await locks.queue(() => store.cancelJobs(null, [job.jobId], aheadMs));
      const second = await locks.queue(() => store.cancelJobs(null, [job.jobId], aheadMs + 1));
      await locks.release();

      const [cancelled] = await first.done;
      assert.equal(cancelled?.state, 'cancelled');
      const [again] = await second.done;
      assert.deepEqual(again, cancelled, 'the second cancel answers the job the first one cancelled');
    }));
});
