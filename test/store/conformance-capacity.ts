// Capacity on every store (DESIGN.md "Many teams"; API.md "Capacity"), on fixed instants:
// lanes (P0 before P1, P2's share under backlog), deficit round robin across teams, resource
// caps held from lease to completion, failure or expiry (and across two instances), pool
// pauses, lane dispatch caps. Leases go through the lease planner as the API's do.
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import type { JobSpec, Lane } from '../../src/domain/types.js';
import { Metrics } from '../../src/obs/metrics.js';
import { LeasePlanner, type TeamLimitsSource } from '../../src/service/lease-planner.js';
import { allTeamsPause, type LeasedRun, type LeaseRunsRequest, type Store } from '../../src/store/store.js';
import { jobRecord, jobSpec, t0Ms, withStore, type OpenStore } from './conformance-fixtures.js';

/** `count` runs ready at `readyMs` in pool-a, of one team and lane, as one create (each job dispatched by its create). */
export async function readyRuns(store: Store, options: {
  count: number; team?: string; lane?: Lane; readyMs?: number; spec?: Partial<JobSpec>;
}): Promise<string[]> {
  const readyMs = options.readyMs ?? t0Ms;
  const items = Array.from({ length: options.count }, (_, index) => {
    const dueMs = readyMs - options.count + index;
    const spec = jobSpec({ schedule: { at: new Date(dueMs).toISOString() }, lane: options.lane ?? 'P1', ...options.spec });
    return { job: jobRecord(spec, readyMs, options.team ?? 'team-a'), timer: null,
      dueNow: [{ scheduledAtMs: dueMs, fireAtMs: dueMs, status: 'ready' as const }] };
  });
  const outcomes = await store.createJobs(items, readyMs);
  assert.ok(outcomes.every((outcome) => outcome.kind === 'created'));
  return outcomes.map((outcome) => outcome.job.jobId);
}

function planned(store: Store, options: { p2Share?: number; teamLimits?: TeamLimitsSource } = {}): Store {
  return new LeasePlanner({
    store, clock: new VirtualClock(t0Ms), metrics: new Metrics(), logger: { warn: () => undefined },
    ...(options.p2Share === undefined ? {} : { p2Share: options.p2Share }),
    ...(options.teamLimits === undefined ? {} : { teamLimits: options.teamLimits }),
  }).store;
}

function request(max: number, nowMs: number, team: string | null = null): LeaseRunsRequest {
  return { team, pool: 'pool-a', max, leaseMs: 30_000, workerId: 'w', nowMs };
}

async function runningCount(store: Store): Promise<number> {
  const page = await store.listRuns({ team: null, pool: 'pool-a', status: 'running', limit: 1_000 });
  return page.items.length;
}

export function runCapacityConformance(open: OpenStore): void {
  void describe('capacity: lanes', () => {
    void it('leases P0 before P1, and gives P2 its share (20 % ± 2 points) while P0 has a backlog', () =>
      withStore(open, async (store) => {
        await readyRuns(store, { count: 150, lane: 'P2', readyMs: t0Ms - 10_000 });
        await readyRuns(store, { count: 150, lane: 'P1', readyMs: t0Ms - 5_000 });
        await readyRuns(store, { count: 150, lane: 'P0' });
        const leases = planned(store);
        const byLane = new Map<string, number>();
        const firstLanes: string[] = [];
        for (let index = 0; index < 100; index++) {
          const runs = await leases.leaseRuns(request(index < 50 ? 1 : 3, t0Ms));
          for (const run of runs) {
            byLane.set(run.lane!, (byLane.get(run.lane!) ?? 0) + 1);
            if (firstLanes.length < 4) firstLanes.push(run.lane!);
          }
        }
        const total = [...byLane.values()].reduce((sum, count) => sum + count, 0);
        assert.equal(total, 200);
        assert.deepEqual(firstLanes, ['P0', 'P0', 'P0', 'P0'], 'P0 first, though P1 and P2 were ready before it');
        const p2Share = (byLane.get('P2') ?? 0) / total;
        assert.ok(p2Share >= 0.18 && p2Share <= 0.22, `P2 had ${p2Share} of the leases`);
        assert.equal(byLane.get('P1') ?? 0, 10, 'P1 only once P0 ran out');
      }));

    void it('gives P2 everything when P0 and P1 have nothing ready, and P0 everything when P2 has nothing', () =>
      withStore(open, async (store) => {
        await readyRuns(store, { count: 20, lane: 'P2' });
        const leases = planned(store);
        assert.equal((await leases.leaseRuns(request(20, t0Ms))).length, 20);
        await readyRuns(store, { count: 20, lane: 'P0', readyMs: t0Ms + 1 });
        const runs = await leases.leaseRuns(request(20, t0Ms + 1));
        assert.deepEqual(new Set(runs.map((run) => run.lane)), new Set(['P0']));
        assert.equal(runs.length, 20);
      }));

    void it('holds P2 to the configured share (--p2-share)', () => withStore(open, async (store) => {
      await readyRuns(store, { count: 100, lane: 'P2' });
      await readyRuns(store, { count: 100, lane: 'P1' });
      const runs = await planned(store, { p2Share: 0.5 }).leaseRuns(request(40, t0Ms));
      assert.equal(runs.filter((run) => run.lane === 'P2').length, 20);
    }));
  });

  void describe('capacity: fair leasing across teams', () => {
    void it('serves a team\'s trickle within one round of another team\'s backlog (deficit round robin)', () =>
      withStore(open, async (store) => {
        await readyRuns(store, { count: 200, team: 'team-a', readyMs: t0Ms - 60_000 });
        await readyRuns(store, { count: 3, team: 'team-b' });
        const leases = planned(store);
        const order: string[] = [];
        for (let index = 0; index < 8; index++) order.push(...(await leases.leaseRuns(request(1, t0Ms))).map((run) => run.team));
        assert.deepEqual(order.slice(0, 6).filter((team) => team === 'team-b').length, 3, `order ${order.join(',')}`);
        assert.deepEqual(order.slice(6), ['team-a', 'team-a'], 'team-a takes everything once team-b is served');
        // A batch lease shares by weight too: 2 to 1.
        await readyRuns(store, { count: 50, team: 'team-b', readyMs: t0Ms + 1 });
        const weighted = planned(store, { teamLimits: { teamLimits: (team) => ({ dispatchPerS: null, weight: team === 'team-a' ? 2 : 1 }) } });
        const batch = await weighted.leaseRuns(request(30, t0Ms + 1));
        assert.equal(batch.filter((run) => run.team === 'team-a').length, 20);
        assert.equal(batch.filter((run) => run.team === 'team-b').length, 10);
      }));

    void it('leases a team\'s own runs only, in lane order, for a team key', () => withStore(open, async (store) => {
      await readyRuns(store, { count: 5, team: 'team-a' });
      await readyRuns(store, { count: 5, team: 'team-b', lane: 'P0' });
      const runs = await planned(store).leaseRuns(request(10, t0Ms, 'team-a'));
      assert.equal(runs.length, 5);
      assert.ok(runs.every((run) => run.team === 'team-a'));
    }));
  });

  void describe('capacity: resource caps', () => {
    void it('never runs more of a capped resource than its cap; completion, failure and expiry free a slot', () =>
      withStore(open, async (store) => {
        await readyRuns(store, { count: 6, spec: { resources: ['db'] }, readyMs: t0Ms - 1_000 });
        await readyRuns(store, { count: 3, spec: { resources: ['cache'] } });
        await readyRuns(store, { count: 2 });
        await store.putResourceCap('db', 2, t0Ms);
        const leases = planned(store);
        const first = await leases.leaseRuns(request(20, t0Ms));
        const heldDb = async (): Promise<number> => (await store.resourceUsage(['db']))[0]!.inUse;
        assert.equal(first.length, 2 + 3 + 2, 'two of db; cache has no cap; untagged runs as ever');
        assert.equal(await heldDb(), 2);
        assert.deepEqual(await leases.leaseRuns(request(20, t0Ms)), [], 'the other db runs wait, ready');
        const dbRuns = await dbRunsOf(store, first);
        const succeeded = await store.completeRun({ team: null, runId: dbRuns[0]!.runId, fencingToken: dbRuns[0]!.fencingToken,
          status: 'succeeded', error: null, result: null, nowMs: t0Ms + 1 });
        assert.equal(succeeded.kind, 'completed');
        const second = await leases.leaseRuns(request(20, t0Ms + 1));
        assert.equal(second.length, 1);
        const failed = await store.completeRun({ team: null, runId: dbRuns[1]!.runId, fencingToken: dbRuns[1]!.fencingToken,
          status: 'failed', error: 'boom', result: null, nowMs: t0Ms + 2 });
        assert.equal(failed.kind, 'completed');
        assert.equal((await leases.leaseRuns(request(20, t0Ms + 2))).length, 1);
        assert.equal(await heldDb(), 2);
        // Both held leases run out: their slots go with them, and the waiting runs take them.
        const expired = await store.expireRunLeases(t0Ms + 40_000, 100);
        assert.ok(expired.length >= 2);
        assert.equal(await heldDb(), 0);
        const third = await dbRunsOf(store, await leases.leaseRuns(request(20, t0Ms + 40_000)));
        assert.equal(third.length, 2);
        assert.equal(await heldDb(), 2);
      }));

    void it('a resource without a cap is unlimited, and deleting a cap lifts it', () => withStore(open, async (store) => {
      await readyRuns(store, { count: 4, spec: { resources: ['db'] } });
      await store.putResourceCap('db', 1, t0Ms);
      const leases = planned(store);
      assert.equal((await leases.leaseRuns(request(10, t0Ms))).length, 1);
      assert.equal(await store.deleteResourceCap('db'), true);
      assert.equal(await store.deleteResourceCap('db'), false);
      assert.equal((await leases.leaseRuns(request(10, t0Ms + 2_000))).length, 3);
      assert.deepEqual(await store.resourceUsage(['db']), [{ name: 'db', maxConcurrency: null, inUse: 1 }], 'the run leased under the cap keeps its slot');
    }));

    void it('holds a cap across two store instances leasing at once', async (context: TestContext) => withStore(open, async (store, handle) => {
      if (handle.openPeer === undefined) {
        context.skip('the store under test offers no second instance (openPeer)');
        return;
      }
      const peer = await handle.openPeer();
      await readyRuns(store, { count: 30, spec: { resources: ['db'] } });
      await store.putResourceCap('db', 3, t0Ms);
      const one = planned(store);
      const other = planned(peer);
      const leased: LeasedRun[] = [];
      for (let round = 0; round < 5; round++) {
        const answers = await Promise.all([one.leaseRuns(request(5, t0Ms + round)), other.leaseRuns(request(5, t0Ms + round)),
          other.leaseRuns(request(2, t0Ms + round))]);
        leased.push(...answers.flat());
        assert.ok(await runningCount(store) <= 3, 'never more running than the cap');
      }
      assert.equal(leased.length, 3);
    }));
  });

  void describe('capacity: pauses and dispatch caps', () => {
    void it('a paused team leases nothing in the pool; other teams go on; resume leases again', () =>
      withStore(open, async (store) => {
        await readyRuns(store, { count: 3, team: 'team-a' });
        await readyRuns(store, { count: 3, team: 'team-b' });
        const leases = planned(store);
        await store.setPoolPause('pool-a', 'team-a', true, t0Ms);
        assert.deepEqual(await leases.leaseRuns(request(10, t0Ms, 'team-a')), []);
        const admin = await leases.leaseRuns(request(10, t0Ms));
        assert.deepEqual(admin.map((run) => run.team), ['team-b', 'team-b', 'team-b']);
        const ready = await store.listRuns({ team: 'team-a', status: 'ready', limit: 10 });
        assert.equal(ready.items.length, 3, 'the paused team\'s runs stay ready');
        await store.setPoolPause('pool-a', allTeamsPause, true, t0Ms);
        await store.setPoolPause('pool-a', 'team-a', false, t0Ms);
        assert.deepEqual(await leases.leaseRuns(request(10, t0Ms + 1)), [], 'an admin\'s pause holds every team');
        assert.deepEqual((await store.listPoolPauses('pool-a')).map((pause) => pause.team), [allTeamsPause]);
        await store.clearPoolPauses('pool-a');
        assert.equal((await leases.leaseRuns(request(10, t0Ms + 2))).length, 3);
      }));

    void it('a lane dispatch cap slows handing out and drops nothing', () => withStore(open, async (store) => {
      await readyRuns(store, { count: 30 });
      await store.setLaneDispatchCap('P1', 10);
      const leases = planned(store);
      assert.equal((await leases.leaseRuns(request(25, t0Ms))).length, 10);
      assert.deepEqual(await leases.leaseRuns(request(25, t0Ms)), []);
      assert.equal((await leases.leaseRuns(request(25, t0Ms + 500))).length, 5);
      assert.equal((await leases.leaseRuns(request(25, t0Ms + 2_000))).length, 10);
      assert.equal((await leases.leaseRuns(request(25, t0Ms + 4_000))).length, 5, 'every run is leased in the end');
      await store.setLaneDispatchCap('P1', null);
      assert.deepEqual(await store.listLaneDispatchCaps(), new Map());
    }));

    void it('a team\'s dispatch_per_s slows its runs and not another team\'s', () => withStore(open, async (store) => {
      await readyRuns(store, { count: 20, team: 'team-a' });
      await readyRuns(store, { count: 20, team: 'team-b' });
      const leases = planned(store, { teamLimits: { teamLimits: (team) => ({ dispatchPerS: team === 'team-a' ? 4 : null, weight: 1 }) } });
      const runs = await leases.leaseRuns(request(30, t0Ms));
      assert.equal(runs.filter((run) => run.team === 'team-a').length, 4);
      assert.equal(runs.filter((run) => run.team === 'team-b').length, 20);
    }));
  });
}

async function dbRunsOf(store: Store, runs: readonly LeasedRun[]): Promise<LeasedRun[]> {
  const tagged: LeasedRun[] = [];
  for (const run of runs) {
    const job = await store.getJob(null, run.jobId);
    if (job?.spec.resources.includes('db') === true) tagged.push(run);
  }
  return tagged;
}
