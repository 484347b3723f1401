// A dispatch of an `overlap: replace` job cancels the job's earlier active runs, which it reads
// without locking them; the cancel then waits for each run's lock. When a completion holding
// that lock commits first, the run has succeeded and is not cancelled, and the ledger must not
// say it was: the dispatch wrote the `cancelled` event it had planned from its read regardless
// (found auditing the PostgreSQL writes for statements acting on what they read before a lock
// wait, after the cancel of bench:peers W5). Real PostgreSQL; a third connection holds the
// run's lock so that the completion and the dispatch queue behind it in that order.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createJob, dispatchItem, firePending, leaseOne, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt } from './conformance-fixtures.js';
import { postgresSkipReason, withRowLockQueue } from './postgres-harness.js';

const skip = await postgresSkipReason();
const dueMs = t0Ms + minuteMs;
const nextDueMs = dueMs + minuteMs;

void describe('a replace racing a completion on PostgreSQL', { skip: skip ?? false }, () => {
  void it('the ledger of a run completed while the replacing dispatch waited for its lock ends with its success', () =>
    withRowLockQueue(async ({ store }, locks) => {
      const job = await createJob(store, { timer: timerAt(dueMs), spec: { overlap: 'replace' } });
      const { runId } = await firePending(store, job, dueMs);
      const leased = await leaseOne(store, dueMs);
      assert.equal(leased?.runId, runId);
      const timer = (await pendingTimerOf(store, job))!;
      const shard = await ownShard(store, job.shard, nextDueMs);
      await locks.lock('runs', runId);
      const completing = await locks.queue(() => store.completeRun({
        team: null, runId, fencingToken: leased.fencingToken, status: 'succeeded', error: null, result: null,
        nowMs: nextDueMs,
      }));
      const dispatching = await locks.queue(() =>
        store.dispatch([dispatchItem(shard, timer, { nextTimer: timerAt(nextDueMs + minuteMs) })], nextDueMs));
      await locks.release();

      assert.equal((await completing.done).kind, 'completed', 'the completion got the lock first');
      const [dispatched] = await dispatching.done;
      assert.equal(dispatched?.kind === 'dispatched' && dispatched.runs[0]?.status, 'ready', 'the next occurrence is dispatched');
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'succeeded');
      assert.deepEqual(run.events.map((event) => `${event.type}: ${event.fromStatus} -> ${event.toStatus}`),
        ['dispatched: null -> ready', 'leased: ready -> running', 'succeeded: running -> succeeded'],
        'no cancel recorded for a run the dispatch did not cancel');
    }));
});
