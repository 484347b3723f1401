// A cancel by key prefix locks its jobs in job_id order, as every statement locking several
// jobs does (dispatch, a cancel by ids, leases' release of held runs): it locked them in the
// order its scan met them (key order, or the team's listing index, newest first), so against a
// dispatch or a cancel by ids of the same jobs each could hold one job and wait for the other,
// until PostgreSQL's deadlock detector failed one of them (40P01, found auditing the store's
// lock orders). Real PostgreSQL; a third connection holds one job's lock so that the prefix
// cancel and the other statement queue behind it in that order.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobRecord } from '../../src/domain/types.js';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import type { ShardLease } from '../../src/store/store.js';
import { createJob, dispatchItem, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt } from './conformance-fixtures.js';
import { postgresSkipReason, withRowLockQueue } from './postgres-harness.js';

const skip = await postgresSkipReason();
const dueMs = t0Ms + minuteMs;

void describe('a cancel by key prefix racing statements that lock the same jobs on PostgreSQL', { skip: skip ?? false }, () => {
  const contenders: [string, (store: PostgresStore, jobs: JobRecord[], shards: ShardLease[]) => Promise<unknown>][] = [
    ['a cancel of the jobs by id', (store, jobs) => store.cancelJobs(null, jobs.map((job) => job.jobId), dueMs)],
    ['a dispatch of the jobs', async (store, jobs, shards) => {
      const items = await Promise.all(jobs.map(async (job, index) =>
        dispatchItem(shards[index]!, (await pendingTimerOf(store, job))!)));
      return store.dispatch(items, dueMs);
    }],
  ];
  for (const [name, contend] of contenders) {
    void it(`it and ${name} both finish: neither waits on the other in a cycle`, () =>
      withRowLockQueue(async ({ store }, locks) => {
        // `later` is created first, with the smaller key: the heap, the key index and the
        // team's listing index (newest first) all meet it before `earlier`, whose job_id
        // (which sorts by creation time) comes first.
        const later = await createJob(store, { nowMs: t0Ms + 1, timer: timerAt(dueMs), spec: { key: 'cart/1' } });
        const earlier = await createJob(store, { nowMs: t0Ms, timer: timerAt(dueMs), spec: { key: 'cart/2' } });
        assert.ok(earlier.jobId < later.jobId);
        const jobs = [earlier, later];
        const shards = await Promise.all(jobs.map((job) => ownShard(store, job.shard, dueMs - 1)));
        await locks.lock('jobs', later.jobId);
        // In job_id order, the prefix cancel locks `earlier` and waits for `later`; the other
        // then waits for `earlier`. In scan order it waited for `later` holding nothing, the
        // other took `earlier` and waited for `later`, and the release closed the cycle.
        const cancelling = await locks.queue(() => store.cancelJobsByKeyPrefix(later.team, 'cart/', dueMs));
        const contending = await locks.queue(() => contend(store, jobs, shards));
        await locks.release();

        assert.equal(await cancelling.done, 2, 'the prefix cancel got the lock first and cancelled both jobs');
        await contending.done;
        for (const job of jobs) {
          assert.equal((await store.getJob(null, job.jobId))?.state, 'cancelled');
          assert.equal(await pendingTimerOf(store, job), undefined, 'no timer outlives its cancelled job');
        }
      }));
  }
});
