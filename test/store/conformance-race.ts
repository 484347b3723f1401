// Two connections racing on the same rows (TESTING.md "store conformance"):
// every case runs the same operation from two store instances on one database at once and
// checks that exactly one wins and the loser changes nothing. Any store whose handle offers
// `openPeer` can run it: `runRaceConformance(name, open)`.
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { runIdOf } from '../../src/domain/identity.js';
import type { Store } from '../../src/store/store.js';
import {
  createJob, dispatchItem, jobRecord, jobSpec, leaseTtlMs, minuteMs, pendingTimerOf, t0Ms, timerAt, withStore,
  type OpenStore, type StoreHandle,
} from './conformance-fixtures.js';

type RaceBody = (store: Store, peer: Store) => Promise<void>;

function race(open: OpenStore, body: RaceBody): (context: TestContext) => Promise<void> {
  return (context) => withStore(open, async (store: Store, handle: StoreHandle) => {
    if (handle.openPeer === undefined) {
      context.skip('the store under test offers no second instance (openPeer)');
      return;
    }
    const peer = await handle.openPeer();
    await body(store, peer);
  });
}

/** `count` one-shot jobs triggered now: ready runs in pool-a. */
async function readyRuns(store: Store, count: number, nowMs: number): Promise<string[]> {
  const runIds: string[] = [];
  for (let index = 0; index < count; index++) {
    const job = await createJob(store, { timer: null, spec: { schedule: { at: new Date(nowMs).toISOString() } } });
    const run = await store.triggerJob(null, job.jobId, nowMs);
    assert.ok(run !== null);
    runIds.push(run.runId);
  }
  return runIds;
}

export function runRaceConformance(name: string, open: OpenStore): void {
  void describe(`${name}: two instances racing`, () => {
    void it('dispatching one timer from both instances with the same token makes one run and one next timer',
      race(open, async (store, peer) => {
        const job = await createJob(store);
        const timer = (await pendingTimerOf(store, job))!;
        const [lease] = await store.acquireShardLeases('node-a', [job.shard], leaseTtlMs, t0Ms);
        const item = dispatchItem(lease!, timer, { nextTimer: timerAt(timer.scheduledAtMs + minuteMs) });
        const results = await Promise.all([store.dispatch([item], t0Ms + minuteMs), peer.dispatch([item], t0Ms + minuteMs)]);
        assert.deepEqual(results.map(([result]) => result?.kind).sort(), ['dispatched', 'timer_gone']);
        const runs = await peer.listRuns({ team: null, jobId: job.jobId, limit: 10 });
        assert.deepEqual(runs.items.map((run) => run.runId), [runIdOf(job.jobId, timer.scheduledAtMs)]);
        const next = await pendingTimerOf(peer, job);
        assert.equal(next?.scheduledAtMs, timer.scheduledAtMs + minuteMs, 'exactly one next timer');
      }));

    void it('leasing from both instances at once hands every run to exactly one of them',
      race(open, async (store, peer) => {
        const runIds = await readyRuns(store, 40, t0Ms);
        const request = { team: null, pool: 'pool-a', max: 7, leaseMs: null, workerId: 'w', nowMs: t0Ms };
        const seen: string[] = [];
        for (;;) {
          const [mine, theirs] = await Promise.all([store.leaseRuns(request), peer.leaseRuns(request)]);
          if (mine.length + theirs.length === 0) break;
          seen.push(...mine.map((run) => run.runId), ...theirs.map((run) => run.runId));
        }
        assert.equal(new Set(seen).size, seen.length, 'no run leased twice');
        assert.deepEqual([...seen].sort(), [...runIds].sort(), 'every run leased');
      }));

    void it('a dispatch delayed past a takeover is rejected and writes nothing; the new owner fires',
      race(open, async (store, peer) => {
        const job = await createJob(store);
        const timer = (await pendingTimerOf(store, job))!;
        const [old] = await store.acquireShardLeases('node-a', [job.shard], leaseTtlMs, t0Ms);
        // node-a stalls past its TTL; node-b takes the shard over on the other instance.
        const [taken] = await peer.acquireShardLeases('node-b', [job.shard], leaseTtlMs, t0Ms + leaseTtlMs);
        assert.ok(taken !== undefined && BigInt(taken.token) > BigInt(old!.token));
        const [stale] = await store.dispatch([dispatchItem(old!, timer)], t0Ms + leaseTtlMs + 1);
        assert.deepEqual(stale, { kind: 'stale_token', timerId: timer.timerId });
        assert.equal(await peer.getRun(null, runIdOf(job.jobId, timer.scheduledAtMs)), null, 'nothing written');
        assert.equal((await pendingTimerOf(peer, job))?.timerId, timer.timerId, 'the timer is still pending');
        const [fresh] = await peer.dispatch([dispatchItem(taken, timer)], t0Ms + leaseTtlMs + 2);
        assert.equal(fresh?.kind, 'dispatched');
      }));

    void it('a dispatch racing a takeover either commits before it or is rejected, never after it',
      race(open, async (store, peer) => {
        for (let round = 0; round < 8; round++) {
          const job = await createJob(store);
          const timer = (await pendingTimerOf(store, job))!;
          const nowMs = t0Ms + round * 10 * leaseTtlMs;
          const [old] = await store.acquireShardLeases('node-a', [job.shard], leaseTtlMs, nowMs);
          const [[dispatched], taken] = await Promise.all([
            store.dispatch([dispatchItem(old!, timer)], nowMs + 1),
            peer.acquireShardLeases('node-b', [job.shard], leaseTtlMs, nowMs + 1, { force: true }),
          ]);
          assert.equal(taken.length, 1);
          const [retry] = await peer.dispatch([dispatchItem(taken[0]!, timer)], nowMs + 2);
          // Whichever order the two committed in, the occurrence was dispatched exactly once.
          const kinds = [dispatched?.kind, retry?.kind].sort();
          assert.ok(
            (kinds[0] === 'dispatched' && kinds[1] === 'timer_gone') || (kinds[0] === 'dispatched' && kinds[1] === 'stale_token'),
            `round ${round}: ${kinds.join(', ')}`);
          const runs = await peer.listRuns({ team: null, jobId: job.jobId, limit: 10 });
          assert.equal(runs.items.length, 1);
        }
      }));

    void it('two instances acquiring one expired shard: one wins with a higher token',
      race(open, async (store, peer) => {
        const [first] = await store.acquireShardLeases('node-a', [17], leaseTtlMs, t0Ms);
        const later = t0Ms + leaseTtlMs;
        const [b, c] = await Promise.all([
          store.acquireShardLeases('node-b', [17], leaseTtlMs, later),
          peer.acquireShardLeases('node-c', [17], leaseTtlMs, later),
        ]);
        const winners = [...b, ...c];
        assert.equal(winners.length, 1);
        assert.ok(BigInt(winners[0]!.token) > BigInt(first!.token));
        assert.deepEqual((await store.listShardLeases()).find((lease) => lease.shard === 17), winners[0]);
      }));

    void it('the same key created on both instances at once makes one job; the other answers it',
      race(open, async (store, peer) => {
        const spec = jobSpec({ key: 'nightly' });
        const [a, b] = [jobRecord(spec, t0Ms), jobRecord(spec, t0Ms)];
        const [[first], [second]] = await Promise.all([
          store.createJobs([{ job: a, timer: timerAt(t0Ms + minuteMs) }], t0Ms),
          peer.createJobs([{ job: b, timer: timerAt(t0Ms + minuteMs) }], t0Ms),
        ]);
        assert.deepEqual([first?.kind, second?.kind].sort(), ['created', 'existing']);
        assert.equal(first?.job.jobId, second?.job.jobId);
        const listed = await store.listJobs({ team: 'team-a', limit: 10 });
        assert.equal(listed.items.length, 1);
      }));

    void it('the same attempt completed twice at once, on one instance and on both: accepted once',
      race(open, async (store, peer) => {
        const runIds = await readyRuns(store, 2, t0Ms);
        const leased = await store.leaseRuns({ team: null, pool: 'pool-a', max: 2, leaseMs: 5_000, workerId: 'w', nowMs: t0Ms });
        assert.deepEqual(leased.map((run) => run.runId).sort(), [...runIds].sort());
        for (const [run, second] of [[leased[0]!, store], [leased[1]!, peer]] as const) {
          const request = { team: null, runId: run.runId, fencingToken: run.fencingToken, status: 'succeeded' as const,
            error: null, result: null, nowMs: t0Ms + 1 };
          const outcomes = await Promise.all([store.completeRun(request), second.completeRun(request)]);
          assert.deepEqual(outcomes.map((outcome) => outcome.kind).sort(), ['completed', 'stale_token']);
          const events = (await store.getRun(null, run.runId))!.events.map((event) => event.type);
          assert.deepEqual(events.filter((type) => type === 'succeeded'), ['succeeded'], 'one completion recorded');
        }
      }));

    void it('a completion racing a lease expiry: exactly one of them takes effect',
      race(open, async (store, peer) => {
        const [runId] = await readyRuns(store, 1, t0Ms);
        const [leased] = await store.leaseRuns({ team: null, pool: 'pool-a', max: 1, leaseMs: 5_000, workerId: 'w', nowMs: t0Ms });
        assert.equal(leased?.runId, runId);
        const lateMs = t0Ms + 5_000;
        const [completed, expired] = await Promise.all([
          store.completeRun({ team: null, runId: runId!, fencingToken: leased!.fencingToken, status: 'succeeded',
            error: null, result: { ok: true }, nowMs: lateMs }),
          peer.expireRunLeases(lateMs, 10),
        ]);
        const run = (await store.getRun(null, runId!))!;
        if (completed.kind === 'completed') {
          assert.deepEqual(expired, []);
          assert.equal(run.status, 'succeeded');
        } else {
          assert.equal(completed.kind, 'stale_token');
          assert.deepEqual(expired.map((entry) => entry.runId), [runId]);
          assert.equal(run.status, 'ready');
        }
      }));
  });
}
