// Team limits and create quotas at the store (docs/API.md "Team limits"), on every store and
// the store's clock only (the caller's nowMs): the bucket of create_per_s, a batch let in
// whole or not at all, the pending count of pending_max and when it is counted again, limits
// stored and removed, and two store instances on one database taking from one bucket.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  defaultLimitsEntry, pendingRecountIntervalMs, type CreateJobInput, type CreateQuota, type Store,
} from '../../src/store/store.js';
import { createJob, firePending, jobRecord, jobSpec, leaseOne, minuteMs, t0Ms, timerAt, withStore, type OpenStore } from './conformance-fixtures.js';

const team = 'team-a';

function inputs(count: number, nowMs: number, forTeam = team): CreateJobInput[] {
  return Array.from({ length: count }, () => ({ job: jobRecord(jobSpec(), nowMs, forTeam), timer: timerAt(nowMs + minuteMs) }));
}

async function jobCount(store: Store, forTeam = team): Promise<number> {
  return (await store.listJobs({ team: forTeam, limit: 1_000 })).items.length;
}

function quota(limits: Partial<CreateQuota>): CreateQuota {
  return { team, createPerS: null, pendingMax: null, ...limits };
}

export function runQuotaConformance(open: OpenStore): void {
  void describe('team limits and create quotas', () => {
    void it('stores limits, replaces an entry whole, and removes it', () => withStore(open, async (store) => {
      assert.deepEqual(await store.listTeamLimits(), []);
      await store.putTeamLimits([
        { team: defaultLimitsEntry, createPerS: 100, pendingMax: null, dispatchPerS: null, weight: 1 },
        { team, createPerS: 2.5, pendingMax: 10, dispatchPerS: 7, weight: 3 },
      ], t0Ms);
      await store.putTeamLimits([{ team, createPerS: null, pendingMax: 20, dispatchPerS: null, weight: 2 }], t0Ms);
      assert.deepEqual(await store.listTeamLimits(), [
        { team: defaultLimitsEntry, createPerS: 100, pendingMax: null, dispatchPerS: null, weight: 1 },
        { team, createPerS: null, pendingMax: 20, dispatchPerS: null, weight: 2 },
      ]);
      assert.equal(await store.deleteTeamLimits(team), true);
      assert.equal(await store.deleteTeamLimits(team), false);
      assert.deepEqual((await store.listTeamLimits()).map((entry) => entry.team), [defaultLimitsEntry]);
    }));

    void it('create_per_s: a second\'s worth of tokens, then a refusal that writes nothing and says when to come back', () =>
      withStore(open, async (store) => {
        const limited = quota({ createPerS: 2 });
        for (let index = 0; index < 2; index++) {
          const outcome = await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited);
          assert.equal(outcome.kind, 'created');
        }
        const refused = await store.createJobsWithinQuota(inputs(1, t0Ms + 100), t0Ms + 100, limited);
        assert.deepEqual(refused, { kind: 'refused', limit: 'create_per_s', retryAfterMs: 400 });
        assert.equal(await jobCount(store), 2, 'nothing written');
        const later = await store.createJobsWithinQuota(inputs(1, t0Ms + 500), t0Ms + 500, limited);
        assert.equal(later.kind, 'created', 'half a second refills one token at 2 a second');
      }));

    void it('a batch that does not fit is refused whole; one bigger than a second\'s worth goes in debt when the bucket is full', () =>
      withStore(open, async (store) => {
        const limited = quota({ createPerS: 5 });
        assert.equal((await store.createJobsWithinQuota(inputs(3, t0Ms), t0Ms, limited)).kind, 'created');
        const refused = await store.createJobsWithinQuota(inputs(3, t0Ms), t0Ms, limited);
        assert.deepEqual(refused, { kind: 'refused', limit: 'create_per_s', retryAfterMs: 200 });
        assert.equal(await jobCount(store), 3, 'none of the refused batch written');
        const big = await store.createJobsWithinQuota(inputs(12, t0Ms + 1_000), t0Ms + 1_000, limited);
        assert.ok(big.kind === 'created' && big.outcomes.length === 12);
        // 5 - 12 = -7 tokens: one create waits for 8 tokens, 1.6 s at 5 a second.
        assert.deepEqual(await store.createJobsWithinQuota(inputs(1, t0Ms + 1_000), t0Ms + 1_000, limited),
          { kind: 'refused', limit: 'create_per_s', retryAfterMs: 1_600 });
      }));

    void it('pending_max counts the team\'s active jobs and ready runs, not another team\'s, and counts again after the interval', () =>
      withStore(open, async (store) => {
        const limited = quota({ pendingMax: 3 });
        await createJob(store, { team: 'team-b' });
        assert.equal((await store.createJobsWithinQuota(inputs(2, t0Ms), t0Ms, limited)).kind, 'created');
        const batch = await store.createJobsWithinQuota(inputs(2, t0Ms), t0Ms, limited);
        assert.deepEqual(batch, { kind: 'refused', limit: 'pending_max', retryAfterMs: pendingRecountIntervalMs, pending: 2 });
        const third = await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited);
        assert.equal(third.kind, 'created');
        assert.equal((await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited)).kind, 'refused');
        assert.equal(await jobCount(store), 3);

        // One job fired: its timer is gone and its run is ready; still 3 pending.
        const jobs = (await store.listJobs({ team, limit: 10 })).items;
        const fired = await firePending(store, jobs[0]!, t0Ms + minuteMs, { recurring: false });
        assert.equal(fired.result.kind, 'dispatched');
        const afterInterval = t0Ms + minuteMs + pendingRecountIntervalMs;
        assert.equal((await store.createJobsWithinQuota(inputs(1, afterInterval), afterInterval, limited)).kind, 'refused');
        // Leased: it leaves the count, which is read again only after the interval.
        assert.equal((await leaseOne(store, afterInterval))?.runId, fired.runId);
        assert.equal((await store.createJobsWithinQuota(inputs(1, afterInterval), afterInterval, limited)).kind, 'refused',
          'counted less than the interval ago');
        const next = afterInterval + pendingRecountIntervalMs;
        assert.equal((await store.createJobsWithinQuota(inputs(1, next), next, limited)).kind, 'created');
        // A cancel takes a job out of the count too.
        await store.cancelJob(team, jobs[1]!.jobId, next);
        const later = next + pendingRecountIntervalMs;
        assert.equal((await store.createJobsWithinQuota(inputs(1, later), later, limited)).kind, 'created');
        assert.equal((await store.createJobsWithinQuota(inputs(1, later), later, limited)).kind, 'refused');
      }));

    void it('a bucket never taken from is full when create_per_s comes, though pending_max refused the team before', () =>
      withStore(open, async (store) => {
        await createJob(store, { team });
        await store.putTeamLimits([{ team, createPerS: null, pendingMax: 1, dispatchPerS: null, weight: 1 }], t0Ms);
        assert.equal((await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, quota({ pendingMax: 1 }))).kind, 'refused');
        const both = quota({ pendingMax: 10, createPerS: 3 });
        const later = t0Ms + pendingRecountIntervalMs;
        assert.equal((await store.createJobsWithinQuota(inputs(3, later), later, both)).kind, 'created');
        assert.equal((await store.createJobsWithinQuota(inputs(1, later), later, both)).kind, 'refused');
      }));

    void it('limits set on a team count the active jobs it created before them', () => withStore(open, async (store) => {
      await createJob(store, { team });
      await createJob(store, { team });
      await store.putTeamLimits([{ team, createPerS: null, pendingMax: 2, dispatchPerS: null, weight: 1 }], t0Ms);
      assert.equal((await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, quota({ pendingMax: 2 }))).kind, 'refused');
      await store.putTeamLimits([{ team: defaultLimitsEntry, createPerS: null, pendingMax: 1, dispatchPerS: null, weight: 1 }], t0Ms);
      await createJob(store, { team: 'team-c' });
      // Created after the default entry, without a quota: counted only once an entry with pending_max is stored again.
      await store.putTeamLimits([{ team: defaultLimitsEntry, createPerS: null, pendingMax: 1, dispatchPerS: null, weight: 1 }], t0Ms);
      const teamC = { team: 'team-c', createPerS: null, pendingMax: 1 };
      assert.equal((await store.createJobsWithinQuota(inputs(1, t0Ms, 'team-c'), t0Ms, teamC)).kind, 'refused');
    }));

    void it('a keyed repeat counts as a create, and answers the job that exists', () => withStore(open, async (store) => {
      const limited = quota({ createPerS: 1 });
      const job = jobRecord(jobSpec({ key: 'nightly' }), t0Ms, team, 'hash-1');
      const first = await store.createJobsWithinQuota([{ job, timer: timerAt(t0Ms + minuteMs) }], t0Ms, limited);
      assert.ok(first.kind === 'created' && first.outcomes[0]?.kind === 'created');
      const again = { job: jobRecord(jobSpec({ key: 'nightly' }), t0Ms + 1_000, team, 'hash-1'), timer: timerAt(t0Ms + minuteMs) };
      const repeat = await store.createJobsWithinQuota([again], t0Ms + 1_000, limited);
      assert.ok(repeat.kind === 'created' && repeat.outcomes[0]?.kind === 'existing');
      assert.equal(repeat.outcomes[0].job.jobId, job.jobId);
      assert.equal((await store.createJobsWithinQuota([again], t0Ms + 1_000, limited)).kind, 'refused');
    }));

    void it('two store instances on one database take from one bucket', () => withStore(open, async (store, handle) => {
      if (handle.openPeer === undefined) return;
      const peer = await handle.openPeer();
      try {
        const limited = quota({ createPerS: 3 });
        assert.equal((await store.createJobsWithinQuota(inputs(2, t0Ms), t0Ms, limited)).kind, 'created');
        assert.equal((await peer.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited)).kind, 'created');
        assert.equal((await peer.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited)).kind, 'refused');
        assert.equal((await store.createJobsWithinQuota(inputs(1, t0Ms), t0Ms, limited)).kind, 'refused');
        // Racing: 3 tokens at t0 + 1 s, 6 single creates from both instances at once; exactly 3 let in.
        const at = t0Ms + 1_000;
        const racing = await Promise.all(Array.from({ length: 6 }, (_, index) =>
          (index % 2 === 0 ? store : peer).createJobsWithinQuota(inputs(1, at), at, limited)));
        assert.equal(racing.filter((outcome) => outcome.kind === 'created').length, 3);
        assert.equal(await jobCount(store), 6);
      } finally {
        await peer.close();
      }
    }));
  });
}
