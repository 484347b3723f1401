// The store conformance suite (TESTING.md): one set of tests every Store implementation
// runs from a few lines, `runStoreConformance(name, open)`. It holds the store to the
// invariants of DESIGN.md that live at the sink: shard fencing (2), one run per run_id (1),
// the next timer in the dispatch transaction (3), worker tokens (4), cancel (7), run events
// (6). Nothing here knows which database is underneath.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runIdOf } from '../../src/domain/identity.js';
import type { OccurrenceWrite, Store } from '../../src/store/store.js';
import {
  createJob, dispatchItem, firePending, jobRecord, jobSpec, leaseTtlMs, minuteMs, ownShard, pendingTimerOf,
  t0Ms, timerAt, withStore, type OpenStore,
} from './conformance-fixtures.js';
import { runWorkerConformance } from './conformance-runs.js';
import { runHistoryConformance } from './conformance-history.js';
import { runDispatchAheadConformance } from './conformance-dispatch-ahead.js';
import { runCapacityConformance } from './conformance-capacity.js';
import { runMembershipConformance } from './conformance-membership.js';
import { runQuotaConformance } from './conformance-quotas.js';

export type { OpenStore, StoreHandle } from './conformance-fixtures.js';

export function runStoreConformance(name: string, open: OpenStore): void {
  void describe(`${name}: store conformance`, () => {
    void describe('shard leases', () => runShardLeaseTests(open));
    void describe('dispatch', () => runDispatchTests(open));
    void describe('job writes', () => runJobWriteTests(open));
    runWorkerConformance(open);
    runHistoryConformance(open);
    runDispatchAheadConformance(open);
    runCapacityConformance(open);
    void describe('cluster membership', () => runMembershipConformance(open));
    runQuotaConformance(open);
  });
}

async function tokensOf(store: Store): Promise<Map<number, bigint>> {
  return new Map((await store.listShardLeases()).map((lease) => [lease.shard, BigInt(lease.token)]));
}

function runShardLeaseTests(open: OpenStore): void {
  void it('grants free shards, refuses held ones, and lets another node take over after expiry', () =>
    withStore(open, async (store) => {
      const granted = await store.acquireShardLeases('node-a', [1, 2, 3], leaseTtlMs, t0Ms);
      assert.deepEqual(granted.map((lease) => lease.shard).sort(), [1, 2, 3]);
      assert.ok(granted.every((lease) => lease.nodeId === 'node-a' && lease.expiresAtMs === t0Ms + leaseTtlMs));
      const byOtherNode = await store.acquireShardLeases('node-b', [2, 3, 4], leaseTtlMs, t0Ms + 1_000);
      assert.deepEqual(byOtherNode.map((lease) => lease.shard), [4], 'held shards are refused');
      const takeover = await store.acquireShardLeases('node-b', [2], leaseTtlMs, t0Ms + leaseTtlMs);
      assert.equal(takeover.length, 1);
      assert.ok(BigInt(takeover[0]!.token) > BigInt(granted.find((lease) => lease.shard === 2)!.token));
    }));

  void it('grants a node its own shard again with a new, higher token', () => withStore(open, async (store) => {
    const [first] = await store.acquireShardLeases('node-a', [7], leaseTtlMs, t0Ms);
    const [again] = await store.acquireShardLeases('node-a', [7], leaseTtlMs, t0Ms + 1);
    assert.ok(first !== undefined && again !== undefined);
    assert.ok(BigInt(again.token) > BigInt(first.token));
  }));

  void it('renews only while node and token still match', () => withStore(open, async (store) => {
    const leases = await store.acquireShardLeases('node-a', [5, 6], leaseTtlMs, t0Ms);
    const renewed = await store.renewShardLeases('node-a', leases, leaseTtlMs, t0Ms + 3_000);
    assert.deepEqual(renewed.map((lease) => [lease.shard, lease.token, lease.expiresAtMs]).sort(),
      leases.map((lease) => [lease.shard, lease.token, t0Ms + 13_000]).sort());
    assert.deepEqual(await store.renewShardLeases('node-b', leases, leaseTtlMs, t0Ms + 3_000), []);
    await store.acquireShardLeases('node-b', [6], leaseTtlMs, t0Ms + 13_000);
    const afterTakeover = await store.renewShardLeases('node-a', leases, leaseTtlMs, t0Ms + 13_001);
    assert.deepEqual(afterTakeover.map((lease) => lease.shard), [5]);
  }));

  void it('force takes a held shard; release frees it at once; tokens only grow', () => withStore(open, async (store) => {
    const seen: bigint[] = [];
    const [a] = await store.acquireShardLeases('node-a', [9], leaseTtlMs, t0Ms);
    seen.push(BigInt(a!.token));
    const [forced] = await store.acquireShardLeases('node-b', [9], leaseTtlMs, t0Ms + 1, { force: true });
    assert.equal(forced?.nodeId, 'node-b');
    seen.push(BigInt(forced.token));
    await store.releaseShardLeases('node-b', [forced]);
    assert.equal((await tokensOf(store)).has(9), false, 'a released lease is not listed');
    const [afterRelease] = await store.acquireShardLeases('node-a', [9], leaseTtlMs, t0Ms + 2);
    assert.equal(afterRelease?.nodeId, 'node-a');
    seen.push(BigInt(afterRelease.token));
    for (let index = 1; index < seen.length; index++) assert.ok(seen[index]! > seen[index - 1]!, 'tokens only grow');
  }));

  void it('answers every shard of a 1,024-shard acquire in one call', () => withStore(open, async (store) => {
    const shards = Array.from({ length: 1024 }, (_, shard) => shard);
    const granted = await store.acquireShardLeases('node-a', shards, leaseTtlMs, t0Ms);
    assert.equal(granted.length, 1024);
    assert.equal(new Set(granted.map((lease) => lease.token)).size, 1024, 'every grant has its own token');
    assert.equal((await store.listShardLeases()).length, 1024);
  }));
}

function runDispatchTests(open: OpenStore): void {
  void it('dispatches atomically: run ready, timer consumed, next timer written, event appended', () =>
    withStore(open, async (store) => {
      const job = await createJob(store);
      const { result, runId, timer } = await firePending(store, job, t0Ms + minuteMs);
      assert.equal(result.kind, 'dispatched');
      assert.deepEqual(result.runs, [{ runId, status: 'ready', inserted: true }]);
      assert.equal(result.pool, 'pool-a');
      const next = await pendingTimerOf(store, job);
      assert.equal(next?.scheduledAtMs, timer.scheduledAtMs + minuteMs);
      assert.equal(result.nextTimerId, next.timerId);
      assert.notEqual(next.timerId, timer.timerId);
      const stored = await store.getJob(null, job.jobId);
      assert.equal(stored?.nextScheduledAtMs, timer.scheduledAtMs + minuteMs);
      assert.equal(stored.state, 'active');
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'ready');
      assert.equal(run.dispatchedAtMs, t0Ms + minuteMs);
      assert.deepEqual(run.events.map((event) => [event.type, event.toStatus]), [['dispatched', 'ready']]);
    }));

  void it('finishes a one-shot job when there is no next timer', () => withStore(open, async (store) => {
    const job = await createJob(store, { spec: { schedule: { at: new Date(t0Ms + minuteMs).toISOString() } } });
    const { result } = await firePending(store, job, t0Ms + minuteMs, { recurring: false });
    assert.equal(result.kind === 'dispatched' && result.nextTimerId, null);
    assert.equal(await pendingTimerOf(store, job), undefined);
    const stored = await store.getJob(null, job.jobId);
    assert.equal(stored?.state, 'done');
    assert.equal(stored.nextFireAtMs, null);
    assert.equal(await store.countJobsWithoutTimer(), 0, 'a done job is not a silent miss');
  }));

  void it('rejects a stale shard token and writes nothing, even after the newer holder released', () =>
    withStore(open, async (store) => {
      const job = await createJob(store);
      const timer = (await pendingTimerOf(store, job))!;
      const zombie = await ownShard(store, job.shard, t0Ms, 'node-a');
      const [newer] = await store.acquireShardLeases('node-b', [job.shard], leaseTtlMs, t0Ms + leaseTtlMs + 1);
      assert.ok(newer !== undefined && BigInt(newer.token) > BigInt(zombie.token));
      const delayed = dispatchItem(zombie, timer, { nextTimer: timerAt(timer.scheduledAtMs + minuteMs) });
      assert.deepEqual(await store.dispatch([delayed], t0Ms + minuteMs), [{ kind: 'stale_token', timerId: timer.timerId }]);
      await store.releaseShardLeases('node-b', [newer]);
      assert.deepEqual(await store.dispatch([delayed], t0Ms + minuteMs), [{ kind: 'stale_token', timerId: timer.timerId }]);
      assert.deepEqual(await pendingTimerOf(store, job), timer, 'the timer is untouched');
      assert.equal(await store.getRun(null, runIdOf(job.jobId, timer.scheduledAtMs)), null, 'no run was written');
      assert.deepEqual(await store.getJob(null, job.jobId), job, 'the job is untouched');
      const [current] = await store.dispatch([dispatchItem(newer, timer)], t0Ms + minuteMs);
      assert.equal(current?.kind, 'dispatched', 'the newest token still works');
    }));

  void it('fences each item of a batch on its own: one stale item does not stop the others', () =>
    withStore(open, async (store) => {
      const jobA = await createJob(store);
      let jobB = await createJob(store);
      while (jobB.shard === jobA.shard) jobB = await createJob(store);
      const first = await store.acquireShardLeases('node-a', [jobA.shard, jobB.shard], leaseTtlMs, t0Ms);
      await store.acquireShardLeases('node-a', [jobB.shard], leaseTtlMs, t0Ms + 1);
      const leaseOf = (shard: number) => first.find((lease) => lease.shard === shard)!;
      const results = await store.dispatch([
        dispatchItem(leaseOf(jobA.shard), (await pendingTimerOf(store, jobA))!),
        dispatchItem(leaseOf(jobB.shard), (await pendingTimerOf(store, jobB))!),
      ], t0Ms + minuteMs);
      assert.deepEqual(results.map((result) => result.kind), ['dispatched', 'stale_token']);
    }));

  void it('is a no-op for an occurrence dispatched twice (one run per run_id) and for a consumed timer', () =>
    withStore(open, async (store) => {
      const job = await createJob(store);
      const { runId, timer } = await firePending(store, job, t0Ms + minuteMs);
      const lease = await ownShard(store, job.shard, t0Ms + minuteMs);
      const again = await store.dispatch([dispatchItem(lease, timer)], t0Ms + minuteMs + 5);
      assert.deepEqual(again, [{ kind: 'timer_gone', timerId: timer.timerId }]);
      const next = (await pendingTimerOf(store, job))!;
      const repeated = dispatchItem(lease, next, {
        occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }],
        nextTimer: timerAt(next.scheduledAtMs),
      });
      const [duplicate] = await store.dispatch([repeated], t0Ms + minuteMs + 10);
      assert.ok(duplicate?.kind === 'dispatched');
      assert.deepEqual(duplicate.runs, [{ runId, status: 'ready', inserted: false }]);
      const run = await store.getRun(null, runId);
      assert.equal(run?.dispatchedAtMs, t0Ms + minuteMs, 'the first dispatch stands');
      assert.equal(run.events.length, 1, 'no event for a no-op');
      const page = await store.listRuns({ team: null, jobId: job.jobId, limit: 10 });
      assert.equal(page.items.length, 1);
    }));

  void it('never fires a cancelled job: cancel deletes the timer and the old timer answers timer_gone', () =>
    withStore(open, async (store) => {
      const job = await createJob(store);
      const timer = (await pendingTimerOf(store, job))!;
      const cancelled = await store.cancelJob('team-a', job.jobId, t0Ms + 1);
      assert.equal(cancelled?.state, 'cancelled');
      assert.equal(await pendingTimerOf(store, job), undefined);
      const again = await store.cancelJob('team-a', job.jobId, t0Ms + 2);
      assert.deepEqual(again, cancelled, 'cancel is idempotent');
      const lease = await ownShard(store, job.shard);
      assert.deepEqual(await store.dispatch([dispatchItem(lease, timer)], t0Ms + minuteMs),
        [{ kind: 'timer_gone', timerId: timer.timerId }]);
      assert.equal(await store.getRun(null, runIdOf(job.jobId, timer.scheduledAtMs)), null);
      assert.equal(await store.triggerJob(null, job.jobId, t0Ms + 3), null, 'a cancelled job is not triggered');
    }));

  void it('answers timer_gone for a paused job and for a timer replaced by a patch', () => withStore(open, async (store) => {
    const paused = await createJob(store);
    const pausedTimer = (await pendingTimerOf(store, paused))!;
    const pause = await store.changeJob({ team: 'team-a', jobId: paused.jobId, expectedVersion: 1, state: 'paused',
      timer: null, nowMs: t0Ms + 1 });
    assert.equal(pause.kind, 'changed');
    const patched = await createJob(store);
    const oldTimer = (await pendingTimerOf(store, patched))!;
    await store.changeJob({ team: 'team-a', jobId: patched.jobId, expectedVersion: 1,
      spec: jobSpec({ payload: 2 }), timer: timerAt(oldTimer.scheduledAtMs), nowMs: t0Ms + 1 });
    const newTimer = (await pendingTimerOf(store, patched))!;
    assert.notEqual(newTimer.timerId, oldTimer.timerId, 'a replaced timer gets a new id');
    const leases = await store.acquireShardLeases('node-a', [paused.shard, patched.shard], leaseTtlMs, t0Ms);
    const leaseOf = (shard: number) => leases.find((lease) => lease.shard === shard)!;
    const results = await store.dispatch([
      dispatchItem(leaseOf(paused.shard), pausedTimer),
      dispatchItem(leaseOf(patched.shard), oldTimer),
    ], t0Ms + minuteMs);
    assert.deepEqual(results.map((result) => result.kind), ['timer_gone', 'timer_gone']);
  }));

  void it('records skipped occurrences and a catch-up summary in the same transaction', () =>
    withStore(open, async (store) => {
      const job = await createJob(store);
      const timer = (await pendingTimerOf(store, job))!;
      const lease = await ownShard(store, job.shard);
      const earlierMs = timer.scheduledAtMs - minuteMs;
      const [result] = await store.dispatch([{
        ...dispatchItem(lease, timer, { nextTimer: timerAt(timer.scheduledAtMs + minuteMs) }),
        occurrences: [
          { scheduledAtMs: earlierMs, fireAtMs: earlierMs, status: 'skipped_outage', reason: 'scheduler was down' },
          { scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' },
        ],
        summary: { skippedCount: 40, fromScheduledAtMs: earlierMs - 40 * minuteMs, toScheduledAtMs: earlierMs - minuteMs,
          reason: 'catch_up latest' },
      }], t0Ms + minuteMs);
      assert.ok(result?.kind === 'dispatched');
      assert.deepEqual(result.runs.map((run) => run.status), ['skipped_outage', 'ready']);
      const skipped = await store.getRun(null, runIdOf(job.jobId, earlierMs));
      assert.equal(skipped?.lastError, 'scheduler was down');
      const events = (await store.listRuns({ team: null, jobId: job.jobId, limit: 10 })).items;
      assert.equal(events.length, 2);
      const latest = await store.getRun(null, runIdOf(job.jobId, timer.scheduledAtMs));
      assert.ok(latest?.events.some((event) => event.type === 'catch_up_summary'));
    }));
}

function runJobWriteTests(open: OpenStore): void {
  void it('dispatches a job due at its create in the create: its run is leasable at once, with no timer; a repeated key writes none', () =>
    withStore(open, async (store) => {
      const dueMs = t0Ms - 5_000;
      const oneShot = (key: string | null, hash: string) => ({
        ...jobRecord(jobSpec({ key, schedule: { at: new Date(dueMs).toISOString() } }), t0Ms, 'team-a', hash),
        state: 'done' as const,
      });
      const ready: OccurrenceWrite = { scheduledAtMs: dueMs, fireAtMs: dueMs, status: 'ready' };
      const skipped: OccurrenceWrite = { scheduledAtMs: dueMs, fireAtMs: dueMs, status: 'skipped_outage', reason: 'too old' };
      const plain = oneShot(null, 'hash-plain');
      const keyed = oneShot('due-now', 'hash-keyed');
      const old = oneShot(null, 'hash-old');
      const outcomes = await store.createJobs([
        { job: plain, timer: null, dueNow: [ready] },
        { job: keyed, timer: null, dueNow: [ready] },
        { job: old, timer: null, dueNow: [skipped] },
      ], t0Ms);
      assert.deepEqual(outcomes.map((outcome) => outcome.kind), ['created', 'created', 'created']);

      for (const job of [plain, keyed, old]) {
        assert.equal(await pendingTimerOf(store, job), undefined, 'a job dispatched at its create has no timer');
        const stored = await store.getJob(null, job.jobId);
        assert.equal(stored?.state, 'done');
        assert.equal(stored?.nextFireAtMs, null);
      }
      const run = await store.getRun('team-a', runIdOf(plain.jobId, dueMs));
      assert.equal(run?.status, 'ready');
      assert.equal(run?.dispatchedAtMs, t0Ms);
      assert.equal(run?.fireAtMs, dueMs);
      assert.deepEqual(run?.events.map((event) => [event.type, event.fromStatus, event.toStatus, event.detail]),
        [['dispatched', null, 'ready', { at_create: true }]]);
      const skippedRun = await store.getRun('team-a', runIdOf(old.jobId, dueMs));
      assert.equal(skippedRun?.status, 'skipped_outage');
      assert.equal(skippedRun?.lastError, 'too old');
      assert.deepEqual(skippedRun?.events.map((event) => [event.type, event.toStatus, event.detail]),
        [['skipped', 'skipped_outage', { reason: 'too old' }]]);

      // Leasable now, by any worker of the pool: the two ready runs and not the skipped one.
      const leased = await store.leaseRuns({ team: null, pool: 'pool-a', max: 10, leaseMs: null, workerId: 'w', nowMs: t0Ms });
      assert.deepEqual(leased.map((item) => item.runId).sort(),
        [runIdOf(plain.jobId, dueMs), runIdOf(keyed.jobId, dueMs)].sort());

      // The same key again, as a retried request would send it: the job that exists answers,
      // and the repeat's own job id has no run.
      const repeat = oneShot('due-now', 'hash-keyed');
      const [again] = await store.createJobs([{ job: repeat, timer: null, dueNow: [ready] }], t0Ms + 1);
      assert.equal(again?.kind, 'existing');
      assert.equal(again?.job.jobId, keyed.jobId);
      assert.equal(await store.getRun(null, runIdOf(repeat.jobId, dueMs)), null);
    }));

  void it('answers existing for the same key and body, key_conflict for another body, per team', () =>
    withStore(open, async (store) => {
      const spec = jobSpec({ key: 'invoice-export' });
      const first = jobRecord(spec, t0Ms, 'team-a', 'hash-1');
      const same = jobRecord(spec, t0Ms, 'team-a', 'hash-1');
      const other = jobRecord(spec, t0Ms, 'team-a', 'hash-2');
      const otherTeam = jobRecord(spec, t0Ms, 'team-b', 'hash-2');
      const inOneBatch = await store.createJobs([
        { job: first, timer: timerAt(t0Ms + minuteMs) },
        { job: same, timer: timerAt(t0Ms + minuteMs) },
        { job: other, timer: timerAt(t0Ms + minuteMs) },
      ], t0Ms);
      assert.deepEqual(inOneBatch.map((outcome) => [outcome.kind, outcome.job.jobId]),
        [['created', first.jobId], ['existing', first.jobId], ['key_conflict', first.jobId]]);
      // Separate calls in the same turn share a commit and still see each other.
      const [again, conflict, team] = await Promise.all([
        store.createJobs([{ job: jobRecord(spec, t0Ms, 'team-a', 'hash-1'), timer: null }], t0Ms),
        store.createJobs([{ job: jobRecord(spec, t0Ms, 'team-a', 'hash-3'), timer: null }], t0Ms),
        store.createJobs([{ job: otherTeam, timer: null }], t0Ms),
      ]);
      assert.equal(again[0]?.kind, 'existing');
      assert.equal(conflict[0]?.kind, 'key_conflict');
      assert.equal(team[0]?.kind, 'created');
      assert.equal((await store.listJobs({ team: 'team-a', limit: 10 })).items.length, 1);
    }));

  void it('matches a job stored with the hash of its body text by that hash, and finds jobs by key and key prefix', () =>
    withStore(open, async (store) => {
      const spec = jobSpec({ key: 'legacy/export' });
      const [stored] = await store.createJobs([{ job: jobRecord(spec, t0Ms, 'team-a', 'text-hash'), timer: null }], t0Ms);
      assert.equal(stored?.kind, 'created');
      const repeat = (legacyTextHash?: string) => store.createJobs([{
        job: jobRecord(spec, t0Ms, 'team-a', 'c1:canonical-hash'), timer: null, ...(legacyTextHash === undefined ? {} : { legacyTextHash }),
      }], t0Ms);
      assert.equal((await repeat('text-hash'))[0]?.kind, 'existing', 'the same text as the stored hash was taken from');
      assert.equal((await repeat('other-text'))[0]?.kind, 'key_conflict');
      assert.equal((await repeat())[0]?.kind, 'key_conflict');
      await createJob(store, { spec: { key: 'legacy/other' } });
      await createJob(store, { spec: { key: 'legacy%' } });
      await createJob(store, { spec: { key: 'legacy/export' }, team: 'team-b' });
      const keys = async (filter: { key?: string; keyPrefix?: string }): Promise<string[]> =>
        (await store.listJobs({ team: 'team-a', limit: 10, ...filter })).items.map((job) => job.spec.key ?? '').sort();
      assert.deepEqual(await keys({ key: 'legacy/export' }), ['legacy/export']);
      assert.deepEqual(await keys({ keyPrefix: 'legacy/' }), ['legacy/export', 'legacy/other']);
      assert.deepEqual(await keys({ keyPrefix: 'legacy%' }), ['legacy%'], 'a prefix is text, not a pattern');
      assert.deepEqual(await keys({ key: 'legacy' }), []);
    }));

  void it('hides another team\'s job exactly like an unknown one', () => withStore(open, async (store) => {
    const job = await createJob(store, { team: 'team-b' });
    assert.equal(await store.getJob('team-a', job.jobId), null);
    assert.equal(await store.cancelJob('team-a', job.jobId, t0Ms), null);
    assert.equal(await store.triggerJob('team-a', job.jobId, t0Ms), null);
    const change = await store.changeJob({ team: 'team-a', jobId: job.jobId, expectedVersion: 1, timer: 'keep',
      nowMs: t0Ms });
    assert.equal(change.kind, 'not_found');
    assert.equal((await store.getJob('team-b', job.jobId))?.jobId, job.jobId);
    assert.equal((await store.getJob(null, job.jobId))?.jobId, job.jobId, 'an admin sees every team');
  }));

  void it('applies a change only at the expected version', () => withStore(open, async (store) => {
    const job = await createJob(store);
    const stale = await store.changeJob({ team: 'team-a', jobId: job.jobId, expectedVersion: 0, timer: null,
      state: 'paused', nowMs: t0Ms + 1 });
    assert.equal(stale.kind, 'version_conflict');
    assert.ok((await pendingTimerOf(store, job)) !== undefined, 'a refused change writes nothing');
    const changed = await store.changeJob({ team: 'team-a', jobId: job.jobId, expectedVersion: 1,
      timer: timerAt(t0Ms + 5 * minuteMs), nowMs: t0Ms + 1 });
    assert.ok(changed.kind === 'changed');
    assert.equal(changed.job.version, 2);
    assert.equal(changed.job.nextFireAtMs, t0Ms + 5 * minuteMs);
    assert.equal((await pendingTimerOf(store, job))?.fireAtMs, t0Ms + 5 * minuteMs);
  }));

  void it('cancels many jobs in one call: in order, idempotent, scoped to the team, timers gone', () =>
    withStore(open, async (store) => {
      const [first, second, third] = [await createJob(store), await createJob(store), await createJob(store)];
      const other = await createJob(store, { team: 'team-b' });
      const firstTimer = (await pendingTimerOf(store, first))!;
      const already = await store.cancelJob('team-a', third.jobId, t0Ms + 1);
      const answers = await store.cancelJobs('team-a',
        [second.jobId, 'j_000000000000nosuchjob0000000', first.jobId, other.jobId, third.jobId, second.jobId], t0Ms + 2);
      assert.deepEqual(answers.map((job) => job?.jobId ?? null),
        [second.jobId, null, first.jobId, null, third.jobId, second.jobId], 'in order; unknown and other teams\' jobs are null');
      assert.deepEqual(answers.map((job) => job?.state ?? null), ['cancelled', null, 'cancelled', null, 'cancelled', 'cancelled']);
      assert.deepEqual(answers[4], already, 'an already cancelled job answers as it was');
      assert.equal(answers[0]?.version, second.version + 1, 'cancelled once, though named twice');
      for (const job of [first, second, third]) assert.equal(await pendingTimerOf(store, job), undefined);
      assert.equal((await store.getJob(null, other.jobId))?.state, 'active', 'another team\'s job is untouched');
      assert.notEqual(await pendingTimerOf(store, other), undefined);
      const lease = await ownShard(store, first.shard);
      assert.deepEqual(await store.dispatch([dispatchItem(lease, firstTimer)], t0Ms + minuteMs),
        [{ kind: 'timer_gone', timerId: firstTimer.timerId }], 'a cancelled job never fires (invariant 7)');
      const asAdmin = await store.cancelJobs(null, [other.jobId], t0Ms + 3);
      assert.equal(asAdmin[0]?.state, 'cancelled', 'the admin scope (null) reaches every team');
      assert.deepEqual(await store.cancelJobs('team-a', [], t0Ms + 4), []);
    }));

  void it('cancels by key prefix literally: % _ and \' are ordinary characters, case matters', () =>
    withStore(open, async (store) => {
      const keys = ["a%_'x-1", "a%_'x-2", 'aXYZx-3', "A%_'x-4", "a%_'", 'b-5', "a%_'x-team-b"];
      for (const key of keys) {
        await createJob(store, { spec: { key }, team: key.endsWith('team-b') ? 'team-b' : 'team-a' });
      }
      assert.equal(await store.cancelJobsByKeyPrefix('team-a', "a%_'x", t0Ms + 1), 2);
      assert.equal(await store.cancelJobsByKeyPrefix('team-a', "a%_'x", t0Ms + 2), 0, 'already cancelled ones are not counted');
      const active = (await store.listJobs({ team: null, state: 'active', limit: 100 })).items
        .map((job) => job.spec.key).sort();
      assert.deepEqual(active, ["A%_'x-4", "a%_'", "a%_'x-team-b", 'aXYZx-3', 'b-5']);
      const cancelled = (await store.listJobs({ team: 'team-a', state: 'cancelled', limit: 100 })).items;
      for (const job of cancelled) assert.equal(await pendingTimerOf(store, job), undefined);
    }));

  // A store reads the keys starting with a prefix as a range of its (team, key) index, which
  // must hold them all at its edges: after the prefix, the highest code point, or the one
  // before the surrogates.
  void it('cancels by key prefix every key that starts with it, and no other, at the edges of its key range', () =>
    withStore(open, async (store) => {
      const max = String.fromCodePoint(0x10ffff);
      const cases: [string, string[], string[]][] = [
        ['a', ['a', 'ab', `a${max}`, `a${max}x`, `a${max}${max}`], ['A', 'b', '`', '', 'ä']],
        [`a${max}`, [`a${max}`, `a${max}z`], ['a', 'az', 'b']],
        ['p퟿', ['p퟿', 'p퟿', `p퟿${max}`], ['p', 'p퟾', 'q']],
        [max, [max, `${max}z`, `${max}${max}`], ['z', '￿']],
        ['é', ['é', 'éa', 'é€'], ['e', 'ê', 'f']],
      ];
      for (const [index, [prefix, starting, others]] of cases.entries()) {
        const team = `team-${index}`;
        for (const key of [...starting, ...others].filter((key) => key !== '')) {
          await createJob(store, { team, spec: { key } });
        }
        assert.equal(await store.cancelJobsByKeyPrefix(team, prefix, t0Ms + 1), starting.length, JSON.stringify(prefix));
        const active = (await store.listJobs({ team, state: 'active', limit: 100 })).items.map((job) => job.spec.key).sort();
        assert.deepEqual(active, others.filter((key) => key !== '').sort(), JSON.stringify(prefix));
      }
    }));

  void it('finds active jobs without a pending timer and repairs them once', () => withStore(open, async (store) => {
    const healthy = await createJob(store);
    const orphan = await createJob(store, { timer: null });
    await createJob(store, { timer: null, spec: { key: 'x' } }).then((job) =>
      store.cancelJob(null, job.jobId, t0Ms));
    assert.equal(await store.countJobsWithoutTimer(), 1);
    assert.deepEqual((await store.findJobsWithoutTimer(10)).map((job) => job.jobId), [orphan.jobId]);
    assert.equal(await store.repairJobTimer(orphan.jobId, 99, timerAt(t0Ms + minuteMs), t0Ms), false, 'wrong version');
    assert.equal(await store.repairJobTimer(orphan.jobId, 1, timerAt(t0Ms + minuteMs), t0Ms), true);
    assert.equal(await store.repairJobTimer(orphan.jobId, 1, timerAt(t0Ms + 2 * minuteMs), t0Ms), false,
      'a job with a timer is not repaired again');
    assert.equal(await store.repairJobTimer(healthy.jobId, 1, timerAt(t0Ms + minuteMs), t0Ms), false);
    assert.equal(await store.countJobsWithoutTimer(), 0);
    assert.equal((await pendingTimerOf(store, orphan))?.fireAtMs, t0Ms + minuteMs);
  }));

  void it('loads timers of the given shards in (fire_at, timer_id) pages, before untilMs only', () =>
    withStore(open, async (store) => {
      const jobs = [];
      for (let index = 0; index < 30; index++) {
        jobs.push(await createJob(store, { timer: timerAt(t0Ms + (index % 5) * 1_000) }));
      }
      const allShards = Array.from({ length: 1024 }, (_, shard) => shard);
      const due = await store.loadTimers({ shards: allShards, untilMs: t0Ms + 3_000, limit: 1_000 });
      assert.equal(due.length, 18, 'fire_at < untilMs, exclusive');
      const pages = [];
      let after: { fireAtMs: number; timerId: string } | undefined;
      for (;;) {
        const page = await store.loadTimers({ shards: allShards, untilMs: t0Ms + 10_000, limit: 7, ...(after ? { after } : {}) });
        pages.push(...page);
        if (page.length < 7) break;
        const last = page.at(-1)!;
        after = { fireAtMs: last.fireAtMs, timerId: last.timerId };
      }
      assert.equal(pages.length, 30);
      assert.equal(new Set(pages.map((timer) => timer.timerId)).size, 30, 'no timer twice across pages');
      assert.deepEqual(pages.map((timer) => timer.fireAtMs), [...pages.map((timer) => timer.fireAtMs)].sort((a, b) => a - b));
      const someShards = [...new Set(jobs.slice(0, 3).map((job) => job.shard))];
      const subset = await store.loadTimers({ shards: someShards, untilMs: t0Ms + 10_000, limit: 1_000 });
      assert.deepEqual(new Set(subset.map((timer) => timer.jobId)),
        new Set(jobs.filter((job) => someShards.includes(job.shard)).map((job) => job.jobId)));
      assert.deepEqual(subset[0]?.spec, jobs.find((job) => job.jobId === subset[0]?.jobId)?.spec);
    }));
}
