// Store conformance, worker side: leases with fencing tokens (invariant 4), retries and the
// DLQ, lease expiry, the overlap policies, and two store instances racing for one run.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ParkedWaiterClaim, LeasedRun, Store } from '../../src/store/store.js';
import type { JobSpec } from '../../src/domain/types.js';
import {
  createJob, firePending, heldBehindRunning, jobSpec, leaseOne, leaseTtlMs, minuteMs, t0Ms, withStore, type OpenStore,
} from './conformance-fixtures.js';

export function runWorkerConformance(open: OpenStore): void {
  void describe('worker leases and tokens', () => runLeaseTests(open));
  void describe('retries, dead runs and replay', () => runRetryTests(open));
  void describe('overlap policies', () => runOverlapTests(open));
  void describe('two store instances racing', () => runRacingTests(open));
}

/** A job with one dispatched, ready run. */
async function readyRun(store: Store, spec: Partial<JobSpec> = {}): Promise<{ runId: string; jobId: string }> {
  const job = await createJob(store, { spec });
  const { result, runId } = await firePending(store, job, t0Ms + minuteMs);
  assert.equal(result.kind, 'dispatched');
  return { runId, jobId: job.jobId };
}

const dispatchedAtMs = t0Ms + minuteMs;

function runLeaseTests(open: OpenStore): void {
  void it('leases to parked waiters inside the dispatch, in order, until one is answered short', () =>
    withStore(open, async (store) => {
      assert.ok(store.setParkedWaiters !== undefined, 'both stores lease to parked waiters inside the dispatch');
      const settled: { waiter: string; runIds: string[] }[] = [];
      const waiters = ['first', 'second', 'third'];
      store.setParkedWaiters((pool, nowMs) => {
        const waiter = waiters.shift();
        if (waiter === undefined) return null;
        const claim: ParkedWaiterClaim = {
          request: { team: null, pool, max: 1, leaseMs: 30_000, workerId: waiter, nowMs },
          settle: (runs: LeasedRun[]) => settled.push({ waiter, runIds: runs.map((run) => run.runId) }),
        };
        return claim;
      });
      const job = await createJob(store);
      const { runId } = await firePending(store, job, dispatchedAtMs);
      // The first waiter took the one run; the second was answered short, which ends the pass
      // (it keeps waiting); the third was never claimed.
      assert.deepEqual(settled, [{ waiter: 'first', runIds: [runId] }, { waiter: 'second', runIds: [] }]);
      assert.deepEqual(waiters, ['third']);
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'running');
      assert.equal(run?.workerId, 'first');
      assert.deepEqual(run?.events.map((event) => [event.type, event.atMs]),
        [['dispatched', dispatchedAtMs], ['leased', dispatchedAtMs]]);
      store.setParkedWaiters(null);
    }));

  void it('answers each payload as the JSON text it was stored as, whatever its shape', () =>
    withStore(open, async (store) => {
      const payloads: unknown[] = [
        // No U+0000 and no lone surrogate: the API refuses both (PostgreSQL's JSON functions cannot read them).
        { text: 'line\nbreak "quoted" \\u0000 \u0001 \u2028 \ud83d\ude00', list: [1, 1e21, 1.5e-7, null, true], nested: { deep: [{}] } },
        'a plain string', 42, null, [], [1, 'two'],
      ];
      for (const payload of payloads) {
        await readyRun(store, { payload });
        const leased = await leaseOne(store, dispatchedAtMs + 10);
        assert.ok(leased !== undefined);
        // The text goes into the lease answer as it is: it must be JSON, and the same value.
        assert.deepEqual(JSON.parse(leased.payloadJson), JSON.parse(JSON.stringify(payload)));
      }
    }));

  void it('leases a ready run once, with a token; heartbeats extend; a stale token changes nothing', () =>
    withStore(open, async (store) => {
      const { runId } = await readyRun(store);
      const leased = await leaseOne(store, dispatchedAtMs + 10);
      assert.equal(leased?.runId, runId);
      assert.equal(leased.attempt, 1);
      assert.equal(leased.leaseExpiresAtMs, dispatchedAtMs + 10 + 30_000, 'the job\'s lease_s applies');
      assert.deepEqual(JSON.parse(leased.payloadJson), { hello: 'world' });
      assert.equal(await leaseOne(store, dispatchedAtMs + 20), undefined, 'a running run is not leased again');
      const beat = await store.heartbeatRun('team-a', runId, leased.fencingToken, dispatchedAtMs + 1_000);
      assert.deepEqual(beat, { kind: 'extended', leaseExpiresAtMs: dispatchedAtMs + 31_000 });
      assert.deepEqual(await store.heartbeatRun('team-a', runId, `${leased.fencingToken}0`, dispatchedAtMs + 2_000),
        { kind: 'stale_token' });
      assert.deepEqual(await store.heartbeatRun('team-b', runId, leased.fencingToken, dispatchedAtMs + 2_000),
        { kind: 'not_found' });
      const before = await store.getRun(null, runId);
      const stale = await store.completeRun({ team: 'team-a', runId, fencingToken: 'garbage', status: 'succeeded',
        error: null, result: null, nowMs: dispatchedAtMs + 3_000 });
      assert.deepEqual(stale, { kind: 'stale_token' });
      assert.deepEqual(await store.getRun(null, runId), before, 'a stale completion changes nothing');
      const done = await store.completeRun({ team: 'team-a', runId, fencingToken: leased.fencingToken,
        status: 'succeeded', error: null, result: { rows: 3 }, nowMs: dispatchedAtMs + 4_000 });
      assert.ok(done.kind === 'completed');
      assert.equal(done.run.status, 'succeeded');
      assert.deepEqual(done.run.result, { rows: 3 });
      assert.equal(done.run.finishedAtMs, dispatchedAtMs + 4_000);
      const twice = await store.completeRun({ team: 'team-a', runId, fencingToken: leased.fencingToken,
        status: 'failed', error: 'late', result: null, nowMs: dispatchedAtMs + 5_000 });
      assert.deepEqual(twice, { kind: 'stale_token' }, 'a second completion is rejected');
      const events = (await store.getRun(null, runId))!.events.map((event) => event.type);
      assert.deepEqual(events, ['dispatched', 'leased', 'succeeded'], 'no event per heartbeat');
    }));

  void it('records a completion that does not want the run back exactly as one that does (wantRun false)', () =>
    withStore(open, async (store) => {
      const { runId } = await readyRun(store);
      const leased = (await leaseOne(store, dispatchedAtMs + 10))!;
      const base = { team: 'team-a', runId, error: null, result: { rows: 3 }, nowMs: dispatchedAtMs + 4_000, wantRun: false } as const;
      assert.deepEqual(await store.completeRun({ ...base, fencingToken: `${leased.fencingToken}0`, status: 'succeeded' }),
        { kind: 'stale_token' }, 'the fence holds without the read-back too');
      const done = await store.completeRun({ ...base, fencingToken: leased.fencingToken, status: 'succeeded' });
      // A store may read the run back anyway; one that does not answers `accepted`.
      assert.ok(done.kind === 'accepted' || (done.kind === 'completed' && done.run.status === 'succeeded'), JSON.stringify(done));
      const run = (await store.getRun(null, runId))!;
      assert.equal(run.status, 'succeeded');
      assert.deepEqual(run.result, { rows: 3 });
      assert.equal(run.finishedAtMs, dispatchedAtMs + 4_000);
      assert.deepEqual(run.events.map((event) => event.type), ['dispatched', 'leased', 'succeeded']);
      assert.deepEqual(await store.completeRun({ ...base, fencingToken: leased.fencingToken, status: 'succeeded' }),
        { kind: 'stale_token' }, 'a second completion is rejected');
    }));

  void it('answers each of many completions sent together as it would alone, and releases a held run', () =>
    withStore(open, async (store) => {
      const { first, leased: firstLease, held } = await heldBehindRunning(store);
      const others = await Promise.all([readyRun(store), readyRun(store), readyRun(store)]);
      const leased = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 3, leaseMs: null, workerId: 'w',
        nowMs: t0Ms + 2 * minuteMs });
      const tokenOf = (runId: string): string => leased.find((run) => run.runId === runId)!.fencingToken;
      const [a, b, c] = others.map((run) => run.runId) as [string, string, string];
      const nowMs = t0Ms + 2 * minuteMs + 500;
      const success = { status: 'succeeded', error: null, nowMs, wantRun: false } as const;
      // All in one turn, so a store that groups its writes sees them side by side.
      const outcomes = await Promise.all([
        store.completeRun({ ...success, team: null, runId: first.runId, fencingToken: firstLease.fencingToken, result: null }),
        store.completeRun({ ...success, team: 'team-a', runId: a, fencingToken: `${tokenOf(a)}7`, result: null }),
        store.completeRun({ ...success, team: 'team-a', runId: b, fencingToken: tokenOf(b), result: { n: 1 } }),
        store.completeRun({ ...success, team: 'team-a', runId: b, fencingToken: tokenOf(b), result: { n: 2 } }),
        store.completeRun({ ...success, team: 'team-a', runId: 'no-such-run', fencingToken: tokenOf(c), result: null }),
        store.completeRun({ ...success, team: 'team-b', runId: c, fencingToken: tokenOf(c), result: null }),
        store.completeRun({ ...success, team: 'team-a', runId: c, fencingToken: tokenOf(c), result: 'done' }),
        store.completeRun({ ...success, team: 'team-a', runId: a, fencingToken: 'not-a-token', result: null }),
      ]);
      assert.deepEqual(outcomes.map((outcome) => outcome.kind === 'completed' ? 'accepted' : outcome.kind),
        ['accepted', 'stale_token', 'accepted', 'stale_token', 'not_found', 'not_found', 'accepted', 'stale_token']);
      const runs = await Promise.all([first.runId, a, b, c].map(async (runId) => (await store.getRun(null, runId))!));
      assert.deepEqual(runs.map((run) => run.status), ['succeeded', 'running', 'succeeded', 'succeeded']);
      assert.deepEqual(runs.map((run) => run.result), [null, null, { n: 1 }, 'done'], 'the first of two completions of b counts');
      assert.ok(runs.filter((run) => run.status === 'succeeded').every((run) => run.finishedAtMs === nowMs));
      assert.deepEqual(runs.map((run) => run.events.map((event) => event.type)), [
        ['dispatched', 'leased', 'succeeded'], ['dispatched', 'leased'], ['dispatched', 'leased', 'succeeded'],
        ['dispatched', 'leased', 'succeeded'],
      ]);
      assert.equal((await leaseOne(store, nowMs))?.runId, held.runId, 'the held run was released by its job\'s completion');
      assert.deepEqual((await store.getRun(null, held.runId))!.events.map((event) => event.type), ['dispatched', 'released', 'leased']);
    }));

  for (const wantRun of [false, true]) {
    void it(`answers distinct successes sent together in order when some miss and one releases a held run (wantRun ${wantRun})`,
      () => withStore(open, async (store) => {
        // A group of distinct successes may be written by one statement that leaves out what
        // misses or must release a held run; those are answered by another path, and the
        // answers must still come back in the order asked.
        const { first, leased: firstLease, held } = await heldBehindRunning(store);
        const others = await Promise.all([readyRun(store), readyRun(store), readyRun(store), readyRun(store)]);
        const leased = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 4, leaseMs: null, workerId: 'w',
          nowMs: t0Ms + 2 * minuteMs });
        const tokenOf = (runId: string): string => leased.find((run) => run.runId === runId)!.fencingToken;
        const [a, b, c, d] = others.map((run) => run.runId) as [string, string, string, string];
        const nowMs = t0Ms + 2 * minuteMs + 500;
        const success = { status: 'succeeded', error: null, nowMs, wantRun } as const;
        const outcomes = await Promise.all([
          store.completeRun({ ...success, team: 'team-a', runId: a, fencingToken: tokenOf(a), result: { a: 1 } }),
          store.completeRun({ ...success, team: 'team-a', runId: b, fencingToken: `${tokenOf(b)}7`, result: null }),
          store.completeRun({ ...success, team: null, runId: first.runId, fencingToken: firstLease.fencingToken, result: 'first' }),
          store.completeRun({ ...success, team: 'team-b', runId: c, fencingToken: tokenOf(c), result: null }),
          store.completeRun({ ...success, team: 'team-a', runId: 'no-such-run', fencingToken: tokenOf(d), result: null }),
          store.completeRun({ ...success, team: 'team-a', runId: d, fencingToken: tokenOf(d), result: 'd' }),
        ]);
        const accepted = wantRun ? 'completed' : 'accepted';
        assert.deepEqual(outcomes.map((outcome) => outcome.kind),
          [accepted, 'stale_token', accepted, 'not_found', 'not_found', accepted]);
        if (wantRun) {
          assert.deepEqual(outcomes.map((outcome) => (outcome.kind === 'completed' ? outcome.run.runId : null)),
            [a, null, first.runId, null, null, d], 'each answer is its own run');
        }
        const runs = await Promise.all([a, b, first.runId, c, d].map(async (runId) => (await store.getRun(null, runId))!));
        assert.deepEqual(runs.map((run) => run.status), ['succeeded', 'running', 'succeeded', 'running', 'succeeded']);
        assert.deepEqual(runs.map((run) => run.result), [{ a: 1 }, null, 'first', null, 'd']);
        assert.deepEqual(runs.map((run) => run.events.at(-1)?.type), ['succeeded', 'leased', 'succeeded', 'leased', 'succeeded']);
        assert.equal((await leaseOne(store, nowMs))?.runId, held.runId, 'the held run was released by its job\'s completion');
      }));
  }

  void it('serves lanes in order P0, P1, P2, then by ready time, scoped to pool and team', () =>
    withStore(open, async (store) => {
      const p2 = await readyRun(store, { lane: 'P2' });
      const p0 = await readyRun(store, { lane: 'P0' });
      const p1 = await readyRun(store, { lane: 'P1' });
      await readyRun(store, { pool: 'other-pool' });
      assert.equal(await leaseOne(store, dispatchedAtMs, { team: 'team-b' }), undefined);
      const leased = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 10, leaseMs: 5_000,
        workerId: 'w', nowMs: dispatchedAtMs });
      assert.deepEqual(leased.map((run) => run.runId), [p0.runId, p1.runId, p2.runId]);
      assert.ok(leased.every((run) => run.leaseExpiresAtMs === dispatchedAtMs + 5_000), 'leaseMs overrides lease_s');
      assert.equal(new Set(leased.map((run) => run.fencingToken)).size, 3);
      assert.equal((await leaseOne(store, dispatchedAtMs, { team: null, pool: 'other-pool' }))?.team, 'team-a');
    }));

  void it('shares a pool among several workers leasing at once: each run once, written with the worker that got it', () =>
    withStore(open, async (store) => {
      const lanes = ['P2', 'P0', 'P1', 'P0', 'P2', 'P1', 'P0', 'P1', 'P2', 'P0', 'P1', 'P2'] as const;
      const laneOf = new Map<string, string>();
      for (const lane of lanes) laneOf.set((await readyRun(store, { lane })).runId, lane);
      const ask = (workerId: string, leaseMs: number | null) =>
        store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 3, leaseMs, workerId, nowMs: dispatchedAtMs });
      // Five leases at once for 15 runs where 12 are ready; w4 asks for a lease length of its own.
      const answers = await Promise.all([ask('w0', null), ask('w1', null), ask('w2', null), ask('w3', null), ask('w4', 5_000)]);
      const leasedIds = answers.flat().map((run) => run.runId);
      assert.deepEqual([...leasedIds].sort(), [...laneOf.keys()].sort(), 'every ready run leased, none twice');
      assert.ok(answers.every((runs) => runs.length <= 3), 'no lease answered more than its max');
      assert.deepEqual(answers[0]!.map((run) => laneOf.get(run.runId)), ['P0', 'P0', 'P0'], 'the first lease took the first runs');
      const sameLength = answers.slice(0, 4).flat().map((run) => laneOf.get(run.runId)!);
      assert.deepEqual(sameLength, [...sameLength].sort(), 'leases asked in turn take the runs in lane order');
      for (const [index, runs] of answers.entries()) {
        for (const leased of runs) {
          const run = await store.getRun('team-a', leased.runId);
          assert.equal(run?.workerId, `w${index}`);
          assert.equal(run?.events.at(-1)?.type, 'leased');
          assert.equal((run?.events.at(-1)?.detail as { workerId?: string } | null)?.workerId, `w${index}`);
          assert.equal(leased.leaseExpiresAtMs, dispatchedAtMs + (index === 4 ? 5_000 : jobSpec().lease_s * 1_000),
            `w${index}'s lease length`);
        }
      }
    }));

  void it('re-offers a run whose lease expired; the old token is then stale', () => withStore(open, async (store) => {
    const { runId } = await readyRun(store);
    const first = (await leaseOne(store, dispatchedAtMs, { leaseMs: 5_000 }))!;
    assert.deepEqual(await store.expireRunLeases(dispatchedAtMs + 4_999, 100), []);
    assert.equal(await store.nextLeaseExpiryMs(), dispatchedAtMs + 5_000);
    assert.deepEqual(await store.expireRunLeases(dispatchedAtMs + 5_000, 100),
      [{ runId, pool: 'pool-a', toStatus: 'ready' }]);
    const second = (await leaseOne(store, dispatchedAtMs + 5_001))!;
    assert.equal(second.runId, runId);
    assert.equal(second.attempt, 2);
    assert.ok(BigInt(second.fencingToken) > BigInt(first.fencingToken));
    assert.deepEqual(await store.heartbeatRun(null, runId, first.fencingToken, dispatchedAtMs + 5_002),
      { kind: 'stale_token' });
    const late = await store.completeRun({ team: null, runId, fencingToken: first.fencingToken, status: 'succeeded',
      error: null, result: null, nowMs: dispatchedAtMs + 5_003 });
    assert.deepEqual(late, { kind: 'stale_token' }, 'the zombie worker\'s completion is rejected');
    assert.equal((await store.getRun(null, runId))?.status, 'running');
  }));

  void it('abandons an unsafe job\'s run and kills one out of attempts when the lease expires', () =>
    withStore(open, async (store) => {
      const unsafe = await readyRun(store, { idempotency: 'unsafe' });
      const lastTry = await readyRun(store, { retry: { max_attempts: 1, base_s: 1, max_s: 1 } });
      await store.leaseRuns({ team: null, pool: 'pool-a', max: 10, leaseMs: 5_000, workerId: 'w', nowMs: dispatchedAtMs });
      const expired = await store.expireRunLeases(dispatchedAtMs + leaseTtlMs, 100);
      const byRun = new Map(expired.map((entry) => [entry.runId, entry.toStatus]));
      assert.equal(byRun.get(unsafe.runId), 'abandoned');
      assert.equal(byRun.get(lastTry.runId), 'dead');
      assert.equal((await store.getRun(null, unsafe.runId))?.status, 'abandoned');
      assert.equal(await leaseOne(store, dispatchedAtMs + leaseTtlMs + 1), undefined, 'neither is re-offered');
    }));
}

function runRetryTests(open: OpenStore): void {
  void it('backs off after a failure, then sends the run to the DLQ when attempts run out; replay starts afresh', () =>
    withStore(open, async (store) => {
      const { runId } = await readyRun(store, { retry: { max_attempts: 2, base_s: 10, max_s: 100 } });
      let nowMs = dispatchedAtMs;
      const first = (await leaseOne(store, nowMs))!;
      const failed = await store.completeRun({ team: 'team-a', runId, fencingToken: first.fencingToken,
        status: 'failed', error: 'boom', result: null, nowMs });
      assert.ok(failed.kind === 'completed');
      assert.equal(failed.run.status, 'retry_wait');
      assert.equal(failed.run.lastError, 'boom');
      const delayMs = failed.run.readyAtMs! - nowMs;
      assert.ok(delayMs >= 8_000 && delayMs <= 12_000, `10 s ± 20 %, got ${delayMs} ms`);
      assert.equal(await store.nextLeaseExpiryMs(), null, 'a retry is no lease deadline: nothing for the sweeper');
      assert.equal(await store.nextReadyAtMs('team-a', 'pool-a'), failed.run.readyAtMs);
      assert.equal(await leaseOne(store, failed.run.readyAtMs! - 1), undefined, 'not before its retry time');
      nowMs = failed.run.readyAtMs!;
      const second = (await leaseOne(store, nowMs))!;
      assert.equal(second.attempt, 2);
      const dead = await store.completeRun({ team: 'team-a', runId, fencingToken: second.fencingToken,
        status: 'failed', error: 'boom again', result: null, nowMs });
      assert.ok(dead.kind === 'completed' && dead.run.status === 'dead');
      assert.equal((await store.listRuns({ team: 'team-a', status: 'dead', limit: 10 })).items[0]?.runId, runId);
      const replay = await store.replayRun('team-a', runId, nowMs + 1);
      assert.ok(replay.kind === 'replayed');
      assert.equal(replay.run.status, 'ready');
      assert.equal(replay.run.runId, runId);
      const third = (await leaseOne(store, nowMs + 1))!;
      assert.equal(third.attempt, 3, 'the attempt number keeps counting');
      const retried = await store.completeRun({ team: 'team-a', runId, fencingToken: third.fencingToken,
        status: 'failed', error: 'still', result: null, nowMs: nowMs + 2 });
      assert.ok(retried.kind === 'completed');
      assert.equal(retried.run.status, 'retry_wait', 'the retry budget started afresh');
      const types = (await store.getRun(null, runId))!.events.map((event) => event.type);
      assert.deepEqual(types, ['dispatched', 'leased', 'retry_scheduled', 'leased', 'dead', 'replayed', 'leased',
        'retry_scheduled']);
    }));

  void it('announces the pool when a failure schedules a retry, so waiters parked before it arm for its ready time', () =>
    withStore(open, async (store) => {
      const { runId } = await readyRun(store, { pool: 'pool-retry', retry: { max_attempts: 3, base_s: 10, max_s: 100 } });
      const leased = (await leaseOne(store, dispatchedAtMs, { pool: 'pool-retry' }))!;
      const heard: string[] = [];
      const unsubscribe = store.onRunsReady((pool) => heard.push(pool));
      try {
        const failed = await store.completeRun({ team: null, runId, fencingToken: leased.fencingToken,
          status: 'failed', error: 'boom', result: null, nowMs: dispatchedAtMs });
        assert.ok(failed.kind === 'completed' && failed.run.status === 'retry_wait');
        assert.ok(heard.includes('pool-retry'), `heard ${JSON.stringify(heard)}`);
        assert.equal(await store.nextReadyAtMs(null, 'pool-retry'), failed.run.readyAtMs, 'what a woken waiter arms for');
      } finally {
        unsubscribe();
      }
    }));

  void it('sends failed_permanent to the DLQ at once; replays only dead runs', () => withStore(open, async (store) => {
    const { runId } = await readyRun(store);
    assert.equal((await store.replayRun('team-a', runId, dispatchedAtMs)).kind, 'invalid_state');
    const leased = (await leaseOne(store, dispatchedAtMs))!;
    const outcome = await store.completeRun({ team: 'team-a', runId, fencingToken: leased.fencingToken,
      status: 'failed_permanent', error: 'bad input', result: null, nowMs: dispatchedAtMs + 1 });
    assert.ok(outcome.kind === 'completed' && outcome.run.status === 'dead');
    assert.equal((await store.replayRun('team-b', runId, dispatchedAtMs + 2)).kind, 'not_found');
    assert.equal((await store.replayRun(null, 'no-such-run', dispatchedAtMs + 2)).kind, 'not_found');
  }));
}

function runOverlapTests(open: OpenStore): void {
  void it('forbid skips a new occurrence while the previous run is active; allow dispatches both', () =>
    withStore(open, async (store) => {
      const forbid = await createJob(store, { spec: { overlap: 'forbid' } });
      await firePending(store, forbid, t0Ms + minuteMs);
      const { result, runId } = await firePending(store, forbid, t0Ms + 2 * minuteMs);
      assert.ok(result.kind === 'dispatched');
      assert.deepEqual(result.runs, [{ runId, status: 'skipped_overlap', inserted: true }]);
      assert.ok((await store.getRun(null, runId))?.lastError);
      const allow = await createJob(store, { spec: { overlap: 'allow' } });
      await firePending(store, allow, t0Ms + minuteMs);
      const second = await firePending(store, allow, t0Ms + 2 * minuteMs);
      assert.ok(second.result.kind === 'dispatched' && second.result.runs[0]?.status === 'ready');
    }));

  void it('forbid queues a backlog fired late behind the run before it, in order, instead of skipping it', () =>
    withStore(open, async (store) => {
      // Occurrences of t0+1..3 min fired together at t0+10 min (an outage's backlog under
      // catch_up all, or a scheduler that fell behind): none found the job busy at its time.
      const job = await createJob(store, { spec: { overlap: 'forbid' } });
      const lateMs = t0Ms + 10 * minuteMs;
      const fired: { runId: string; result: Awaited<ReturnType<typeof firePending>>['result'] }[] = [];
      for (let index = 0; index < 3; index++) fired.push(await firePending(store, job, lateMs));
      assert.deepEqual(fired.map(({ result }) => (result.kind === 'dispatched' ? result.runs[0]?.status : result.kind)),
        ['ready', 'ready', 'ready']);
      const queued = await store.getRun(null, fired[1]!.runId);
      assert.equal(queued?.events[0]?.detail?.['held'], true);
      assert.match(String(queued?.events[0]?.detail?.['reason']), /queued behind an earlier run/);
      let nowMs = lateMs;
      for (const { runId } of fired) {
        const leased = await store.leaseRuns({ team: null, pool: 'pool-a', max: 10, leaseMs: null, workerId: 'w', nowMs });
        assert.deepEqual(leased.map((run) => run.runId), [runId], 'one at a time, in scheduled order');
        nowMs += 1_000;
        await store.completeRun({ team: null, runId, fencingToken: leased[0]!.fencingToken, status: 'succeeded',
          error: null, result: null, nowMs });
      }
      assert.deepEqual((await store.getRun(null, fired[2]!.runId))!.events.map((event) => event.type),
        ['dispatched', 'released', 'leased', 'succeeded']);
      // On time again: the next occurrence finds the job idle and dispatches.
      const onTime = await firePending(store, job, t0Ms + 4 * minuteMs + 60 * minuteMs);
      assert.ok(onTime.result.kind === 'dispatched' && onTime.result.runs[0]?.status === 'ready');
    }));

  void it('replace cancels the running run, whose worker then hears cancelled', () => withStore(open, async (store) => {
    const job = await createJob(store, { spec: { overlap: 'replace' } });
    const first = await firePending(store, job, t0Ms + minuteMs);
    const leased = (await leaseOne(store, t0Ms + minuteMs))!;
    const second = await firePending(store, job, t0Ms + 2 * minuteMs);
    assert.ok(second.result.kind === 'dispatched' && second.result.runs[0]?.status === 'ready');
    assert.equal((await store.getRun(null, first.runId))?.status, 'cancelled');
    assert.deepEqual(await store.heartbeatRun(null, first.runId, leased.fencingToken, t0Ms + 2 * minuteMs),
      { kind: 'cancelled' });
    const late = await store.completeRun({ team: null, runId: first.runId, fencingToken: leased.fencingToken,
      status: 'succeeded', error: null, result: null, nowMs: t0Ms + 2 * minuteMs });
    assert.deepEqual(late, { kind: 'cancelled' });
    assert.equal((await leaseOne(store, t0Ms + 2 * minuteMs))?.runId, second.runId);
  }));

  void it('buffer_one holds one occurrence behind the running run, skips further ones, releases it at the end', () =>
    withStore(open, async (store) => {
      const { job, first, leased, held } = await heldBehindRunning(store);
      const skipped = await firePending(store, job, t0Ms + 3 * minuteMs);
      assert.ok(skipped.result.kind === 'dispatched' && skipped.result.runs[0]?.status === 'skipped_overlap');
      assert.equal(await leaseOne(store, t0Ms + 3 * minuteMs), undefined, 'a held run is not leasable');
      const failedOnce = await store.completeRun({ team: null, runId: first.runId, fencingToken: leased.fencingToken,
        status: 'failed', error: 'x', result: null, nowMs: t0Ms + 3 * minuteMs });
      assert.ok(failedOnce.kind === 'completed' && failedOnce.run.status === 'retry_wait');
      assert.equal(await leaseOne(store, t0Ms + 3 * minuteMs), undefined, 'a retry still holds it back');
      const retry = (await leaseOne(store, failedOnce.run.readyAtMs!))!;
      assert.equal(retry.runId, first.runId);
      await store.completeRun({ team: null, runId: first.runId, fencingToken: retry.fencingToken,
        status: 'succeeded', error: null, result: null, nowMs: failedOnce.run.readyAtMs! + 1 });
      const released = await leaseOne(store, failedOnce.run.readyAtMs! + 1);
      assert.equal(released?.runId, held.runId);
      const events = (await store.getRun(null, held.runId))!.events.map((event) => event.type);
      assert.deepEqual(events, ['dispatched', 'released', 'leased']);
    }));

  for (const ending of ['succeeded', 'failed_permanent'] as const) {
    void it(`a held run is released when the run before it ends (${ending}), though the job's overlap changed meanwhile`, () =>
      withStore(open, async (store) => {
        const { job, first, leased, held } = await heldBehindRunning(store);
        const current = (await store.getJob(null, job.jobId))!;
        const changed = await store.changeJob({ team: null, jobId: job.jobId, expectedVersion: current.version,
          spec: { ...current.spec, overlap: 'allow' }, timer: 'keep', nowMs: t0Ms + 2 * minuteMs });
        assert.equal(changed.kind, 'changed');
        const completed = await store.completeRun({ team: null, runId: first.runId, fencingToken: leased.fencingToken,
          status: ending, error: ending === 'succeeded' ? null : 'x', result: null, nowMs: t0Ms + 3 * minuteMs });
        assert.equal(completed.kind, 'completed');
        assert.equal((await leaseOne(store, t0Ms + 3 * minuteMs))?.runId, held.runId, 'the held run is not left waiting forever');
      }));
  }
}

function runRacingTests(open: OpenStore): void {
  void it('lets exactly one of two instances lease a run, and grant a shard', (context) => withStore(open, async (store, handle) => {
    if (handle.openPeer === undefined) {
      context.skip('the store under test offers no second instance (openPeer)');
      return;
    }
    const peer = await handle.openPeer();
    try {
      const { runId } = await readyRun(store);
      const request = { team: null, pool: 'pool-a', max: 5, leaseMs: null, workerId: 'w', nowMs: dispatchedAtMs };
      const [mine, theirs] = await Promise.all([store.leaseRuns(request), peer.leaseRuns(request)]);
      assert.deepEqual([...mine, ...theirs].map((run) => run.runId), [runId], 'exactly one instance wins');
      const [a, b] = await Promise.all([
        store.acquireShardLeases('node-a', [42], leaseTtlMs, t0Ms),
        peer.acquireShardLeases('node-b', [42], leaseTtlMs, t0Ms),
      ]);
      assert.equal(a.length + b.length, 1, 'exactly one node holds the shard');
      const winner = [...a, ...b][0]!;
      const listed = await peer.listShardLeases();
      assert.equal(listed.find((lease) => lease.shard === 42)?.token, winner.token, 'both instances agree');
    } finally {
      await peer.close();
    }
  }));
}
