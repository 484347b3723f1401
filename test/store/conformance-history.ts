// Store conformance, reading side: the run ledger ("did job J run between A and B, and how
// did it end?" is one query, invariant 6), paged lists with team scope, triggers, and the
// store's notifications (runs ready, near timers).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runIdOf } from '../../src/domain/identity.js';
import type { JobRecord, Page } from '../../src/domain/types.js';
import type { LoadedTimer } from '../../src/store/store.js';
import {
  createJob, firePending, jobRecord, jobSpec, leaseOne, minuteMs, pendingTimerOf, t0Ms, timerAt, withStore, type OpenStore,
} from './conformance-fixtures.js';

export function runHistoryConformance(open: OpenStore): void {
  void describe('history and lists', () => runHistoryTests(open));
  void describe('dead man\'s switch', () => runSilenceTests(open));
  void describe('notifications', () => runNotificationTests(open));
}

/** Every item of a paged list, following next_cursor to the end. */
async function allPages<T>(page: (cursor: { cursor?: string }) => Promise<Page<T>>): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | null = null;
  do {
    const answer: Page<T> = await page(cursor === null ? {} : { cursor });
    items.push(...answer.items);
    cursor = answer.nextCursor;
  } while (cursor !== null);
  return items;
}

/** Resolves with the first value a subscription delivers; the test's own timeout bounds the wait. */
function firstDelivery<T>(subscribe: (listener: (value: T) => void) => () => void, accept: (value: T) => boolean):
  Promise<T> {
  return new Promise((resolve) => {
    const unsubscribe = subscribe((value) => {
      if (!accept(value)) return;
      unsubscribe();
      resolve(value);
    });
  });
}

function runHistoryTests(open: OpenStore): void {
  void it('answers a job\'s runs in a time window, newest first, across pages', () => withStore(open, async (store) => {
    const job = await createJob(store);
    for (let minute = 1; minute <= 7; minute++) await firePending(store, job, t0Ms + minute * minuteMs);
    const window = { team: 'team-a', jobId: job.jobId, sinceMs: t0Ms + 2 * minuteMs, untilMs: t0Ms + 6 * minuteMs };
    const first = await store.listRuns({ ...window, limit: 3 });
    assert.deepEqual(first.items.map((run) => run.scheduledAtMs),
      [t0Ms + 5 * minuteMs, t0Ms + 4 * minuteMs, t0Ms + 3 * minuteMs]);
    assert.ok(first.nextCursor !== null);
    const second = await store.listRuns({ ...window, limit: 3, cursor: first.nextCursor });
    assert.deepEqual(second.items.map((run) => run.scheduledAtMs), [t0Ms + 2 * minuteMs]);
    assert.equal(second.nextCursor, null);
    assert.equal((await store.listRuns({ ...window, team: 'team-b', limit: 10 })).items.length, 0);
    assert.equal((await store.listRuns({ team: 'team-a', pool: 'no-such-pool', limit: 10 })).items.length, 0);
    assert.equal((await store.listRuns({ team: null, status: 'ready', limit: 100 })).items.length, 7);
  }));

  void it('lists jobs newest first, paged, filtered by state, pool and label', () => withStore(open, async (store) => {
    const created = [];
    for (let index = 0; index < 5; index++) {
      created.push(await createJob(store, { nowMs: t0Ms + index, spec: {
        pool: index % 2 === 0 ? 'even' : 'odd', labels: index === 3 ? { tier: 'gold' } : { tier: 'basic' },
      } }));
    }
    await createJob(store, { team: 'team-b' });
    const pageOne = await store.listJobs({ team: 'team-a', limit: 2 });
    const pageTwo = await store.listJobs({ team: 'team-a', limit: 2, cursor: pageOne.nextCursor! });
    const pageThree = await store.listJobs({ team: 'team-a', limit: 2, cursor: pageTwo.nextCursor! });
    assert.deepEqual([...pageOne.items, ...pageTwo.items, ...pageThree.items].map((job) => job.jobId),
      created.map((job) => job.jobId).reverse());
    assert.equal(pageThree.nextCursor, null);
    assert.equal((await store.listJobs({ team: 'team-a', pool: 'even', limit: 10 })).items.length, 3);
    assert.deepEqual((await store.listJobs({ team: 'team-a', label: 'tier=gold', limit: 10 })).items.map((job) => job.jobId),
      [created[3]!.jobId]);
    assert.equal((await store.listJobs({ team: 'team-a', label: 'tier', limit: 10 })).items.length, 5);
    assert.equal((await store.listJobs({ team: 'team-a', label: 'missing', limit: 10 })).items.length, 0);
    await store.cancelJob(null, created[0]!.jobId, t0Ms + 10);
    assert.equal((await store.listJobs({ team: 'team-a', state: 'cancelled', limit: 10 })).items.length, 1);
    assert.equal((await store.listJobs({ team: null, limit: 10 })).items.length, 6);
  }));

  // API.md promises newest first and every item once across pages; the order among items with
  // the same time is the store's own (SQLite: insertion order; PostgreSQL: id), so it is not asserted.
  void it('pages through runs that share scheduled_at, in the team list, a job\'s list and the DLQ, each once',
    () => withStore(open, async (store) => {
      const jobs: JobRecord[] = [];
      for (let index = 0; index < 5; index++) jobs.push(await createJob(store, { spec: { retry: { max_attempts: 1, base_s: 1, max_s: 1 } } }));
      const runIds: string[] = [];
      for (const job of jobs) runIds.push((await firePending(store, job, t0Ms + minuteMs)).runId);
      const earlier = await createJob(store, { timer: timerAt(t0Ms + 30_000) });
      const earlierRunId = (await firePending(store, earlier, t0Ms + minuteMs)).runId;
      const teamPages = await allPages((cursor) => store.listRuns({ team: 'team-a', limit: 2, ...cursor }));
      assert.deepEqual(teamPages.map((run) => run.runId).sort(), [...runIds, earlierRunId].sort());
      assert.equal(teamPages.at(-1)?.runId, earlierRunId, 'newest first: the earlier run comes last');
      const adminPages = await allPages((cursor) => store.listRuns({ team: null, limit: 4, ...cursor }));
      assert.deepEqual(adminPages.map((run) => run.runId), teamPages.map((run) => run.runId));
      for (const runId of runIds) {
        const [leased] = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 1, leaseMs: null, workerId: 'w',
          nowMs: t0Ms + minuteMs });
        assert.ok(leased !== undefined, `a run to fail for ${runId}`);
        const outcome = await store.completeRun({ team: 'team-a', runId: leased.runId, fencingToken: leased.fencingToken,
          status: 'failed_permanent', error: 'x', result: null, nowMs: t0Ms + minuteMs });
        assert.equal(outcome.kind, 'completed');
      }
      const deadPages = await allPages((cursor) => store.listRuns({ team: 'team-a', status: 'dead', limit: 2, ...cursor }));
      assert.equal(deadPages.length, 5);
      assert.equal(new Set(deadPages.map((run) => run.runId)).size, 5, 'no dead run twice');
      assert.ok(deadPages.every((run) => run.status === 'dead' && run.scheduledAtMs === t0Ms + minuteMs));
      const jobPages = await allPages((cursor) => store.listRuns({ team: 'team-a', jobId: jobs[0]!.jobId, limit: 1, ...cursor }));
      assert.deepEqual(jobPages.map((run) => run.runId), [runIds[0]]);
    }));

  void it('pages through jobs created in the same millisecond, each once', () => withStore(open, async (store) => {
    const created = [];
    for (let index = 0; index < 5; index++) created.push(await createJob(store, { nowMs: t0Ms }));
    const older = await createJob(store, { nowMs: t0Ms - 1 });
    for (const team of ['team-a', null]) {
      const listed = await allPages((cursor) => store.listJobs({ team, limit: 2, ...cursor }));
      assert.deepEqual(listed.map((job) => job.jobId).sort(), [...created, older].map((job) => job.jobId).sort());
      assert.equal(listed.at(-1)?.jobId, older.jobId, 'newest first: the older job comes last');
    }
  }));

  void it('triggers a run outside the schedule, ready now, with its event', () => withStore(open, async (store) => {
    const job = await createJob(store);
    const run = await store.triggerJob('team-a', job.jobId, t0Ms + 5);
    assert.equal(run?.status, 'ready');
    assert.equal(run.scheduledAtMs, t0Ms + 5);
    const stored = await store.getRun('team-a', run.runId);
    assert.deepEqual(stored?.events.map((event) => event.type), ['triggered']);
    assert.equal(await store.getRun('team-b', run.runId), null, 'another team\'s run answers as unknown');
    assert.equal(await store.nextReadyAtMs('team-a', 'pool-a'), t0Ms + 5);
  }));

  void it('answers the earliest ready run of a pool over every lane, for the team asking', () => withStore(open, async (store) => {
    const low = await createJob(store, { spec: { lane: 'P2' } });
    const high = await createJob(store, { spec: { lane: 'P0' } });
    const other = await createJob(store, { team: 'team-b', spec: { lane: 'P1' } });
    assert.equal(await store.nextReadyAtMs('team-a', 'pool-a'), null, 'nothing ready yet');
    await store.triggerJob('team-b', other.jobId, t0Ms + 3);
    await store.triggerJob('team-a', low.jobId, t0Ms + 7);
    await store.triggerJob('team-a', high.jobId, t0Ms + 9);
    assert.equal(await store.nextReadyAtMs('team-a', 'pool-a'), t0Ms + 7, 'the P2 run is the earliest of team-a');
    assert.equal(await store.nextReadyAtMs('team-b', 'pool-a'), t0Ms + 3);
    assert.equal(await store.nextReadyAtMs(null, 'pool-a'), t0Ms + 3, 'an admin sees every team');
    assert.equal(await store.nextReadyAtMs('team-a', 'pool-b'), null, 'another pool');
  }));
}

function runNotificationTests(open: OpenStore): void {
  void it('announces timers written inside the near horizon, and only those', () => withStore(open, async (store) => {
    const near = jobRecord(jobSpec(), t0Ms);
    const far = jobRecord(jobSpec(), t0Ms);
    const delivered = firstDelivery<LoadedTimer[]>((listener) => store.onNearTimers(listener),
      (timers) => timers.some((timer) => timer.jobId === near.jobId));
    await store.createJobs([
      { job: far, timer: timerAt(t0Ms + 365 * 24 * 60 * minuteMs) },
      { job: near, timer: timerAt(t0Ms + 1_000) },
    ], t0Ms);
    const timers = await delivered;
    assert.deepEqual(timers.map((timer) => timer.jobId), [near.jobId]);
    assert.equal(timers[0]?.fireAtMs, t0Ms + 1_000);
    assert.equal(timers[0]?.jobVersion, 1);
  }));

  void it('writes a keyless group that dispatches at its create, with near and far timers, and announces it', () =>
    withStore(open, async (store) => {
      // A group with no key may be written by one statement (PostgreSQL): its runs, events,
      // timers and notifications must be those the transaction would have written.
      const dueMs = t0Ms - 5_000;
      const oneShot = () => ({ ...jobRecord(jobSpec({ schedule: { at: new Date(dueMs).toISOString() } }), t0Ms), state: 'done' as const });
      const ready = oneShot();
      const skipped = oneShot();
      const near = jobRecord(jobSpec(), t0Ms);
      const far = jobRecord(jobSpec(), t0Ms);
      const readyPool = firstDelivery<string>((listener) => store.onRunsReady(listener), (pool) => pool === 'pool-a');
      const nearTimers = firstDelivery<LoadedTimer[]>((listener) => store.onNearTimers(listener),
        (timers) => timers.some((timer) => timer.jobId === near.jobId));
      const outcomes = await store.createJobs([
        { job: ready, timer: null, dueNow: [{ scheduledAtMs: dueMs, fireAtMs: dueMs, status: 'ready' }] },
        { job: near, timer: timerAt(t0Ms + 1_000) },
        { job: skipped, timer: null, dueNow: [{ scheduledAtMs: dueMs, fireAtMs: dueMs, status: 'skipped_outage', reason: 'too old' }] },
        { job: far, timer: timerAt(t0Ms + 365 * 24 * 60 * minuteMs) },
      ], t0Ms);
      assert.deepEqual(outcomes.map((outcome) => (outcome.kind === 'created' ? outcome.job.jobId : outcome.kind)),
        [ready.jobId, near.jobId, skipped.jobId, far.jobId]);
      assert.equal(await readyPool, 'pool-a');
      assert.deepEqual((await nearTimers).map((timer) => timer.jobId), [near.jobId]);
      const readyRun = await store.getRun(null, runIdOf(ready.jobId, dueMs));
      assert.deepEqual(readyRun?.events.map((event) => [event.type, event.toStatus, event.detail]),
        [['dispatched', 'ready', { at_create: true }]]);
      const skippedRun = await store.getRun(null, runIdOf(skipped.jobId, dueMs));
      assert.equal(skippedRun?.status, 'skipped_outage');
      assert.deepEqual(skippedRun?.events.map((event) => event.type), ['skipped']);
      assert.equal((await pendingTimerOf(store, ready)), undefined);
      assert.equal((await pendingTimerOf(store, near))?.fireAtMs, t0Ms + 1_000);
      assert.equal((await pendingTimerOf(store, far))?.fireAtMs, t0Ms + 365 * 24 * 60 * minuteMs);
      const leased = await store.leaseRuns({ team: null, pool: 'pool-a', max: 10, leaseMs: null, workerId: 'w', nowMs: t0Ms });
      assert.deepEqual(leased.map((run) => run.runId), [runIdOf(ready.jobId, dueMs)], 'the ready run only is leasable');
    }));

  void it('tells pool listeners when runs become leasable, past a listener that throws', () =>
    withStore(open, async (store) => {
      const unsubscribeThrower = store.onRunsReady(() => {
        throw new Error('a careless listener');
      });
      const ready = firstDelivery<string>((listener) => store.onRunsReady(listener), (pool) => pool === 'pool-a');
      const job = await createJob(store);
      const { result } = await firePending(store, job, t0Ms + minuteMs);
      assert.equal(result.kind, 'dispatched', 'the dispatch stands despite the throwing listener');
      assert.equal(await ready, 'pool-a');
      unsubscribeThrower();
    }));
}

const hourMs = 60 * minuteMs;

function runSilenceTests(open: OpenStore): void {
  void it('keeps which silences were announced, across handles, until their end is recorded', () =>
    withStore(open, async (store, handle) => {
      const watched = await createJob(store, { spec: { max_silence_s: 60, owner: 'team-a-oncall', pager: 'pd:team-a' } });
      const other = await createJob(store, { spec: { max_silence_s: 60 } });
      assert.deepEqual(await store.listSilenceAnnounced(10), []);
      await store.setSilenceAnnounced(watched.jobId, t0Ms + minuteMs);
      await store.setSilenceAnnounced(other.jobId, t0Ms + 2 * minuteMs);
      await store.setSilenceAnnounced(other.jobId, null);
      const announced = await store.listSilenceAnnounced(10);
      assert.deepEqual(announced.map((entry) => [entry.job.jobId, entry.silentSinceMs]), [[watched.jobId, t0Ms + minuteMs]]);
      assert.deepEqual([announced[0]!.job.spec.owner, announced[0]!.job.spec.pager], ['team-a-oncall', 'pd:team-a']);
      const before = (await store.getJob(null, watched.jobId))!;
      assert.equal(before.updatedAtMs, watched.updatedAtMs, 'recording an announcement is not a change of the job');
      assert.equal(before.version, watched.version);
      if (handle.openPeer !== undefined) {
        const peer = await handle.openPeer();
        try {
          assert.deepEqual((await peer.listSilenceAnnounced(10)).map((entry) => entry.job.jobId), [watched.jobId]);
        } finally {
          await peer.close();
        }
      }
    }));

  void it('finds active jobs with max_silence_s and no success within it, counted from their creation', () =>
    withStore(open, async (store) => {
      const watched = await createJob(store, { spec: { max_silence_s: 3_600 } });
      await createJob(store, { spec: { max_silence_s: null } });
      const otherTeam = await createJob(store, { spec: { max_silence_s: 3_600 }, team: 'team-b' });
      const shortSwitch = await createJob(store, { spec: { max_silence_s: 60 } });
      assert.deepEqual(await store.findSilentJobs(null, t0Ms + minuteMs - 1, 100), [], 'not silent before its own max_silence_s');
      const early = await store.findSilentJobs(null, t0Ms + minuteMs, 100);
      assert.deepEqual(early.map((entry) => entry.job.jobId), [shortSwitch.jobId]);
      assert.deepEqual([early[0]!.lastSuccessAtMs, early[0]!.silentSinceMs], [null, t0Ms + minuteMs]);
      const later = await store.findSilentJobs(null, t0Ms + hourMs, 100);
      assert.deepEqual(later.map((entry) => entry.job.jobId),
        [shortSwitch.jobId, ...[watched.jobId, otherTeam.jobId].sort()], 'longest silent first, then by job id');
      assert.equal(later[1]!.job.spec.max_silence_s, 3_600, 'the job comes back whole');
      assert.deepEqual((await store.findSilentJobs('team-b', t0Ms + hourMs, 100)).map((entry) => entry.job.jobId),
        [otherTeam.jobId], 'team scope');
      assert.equal((await store.findSilentJobs(null, t0Ms + hourMs, 1)).length, 1, 'limit');
      for (let index = 1; index < later.length; index++) {
        const previous = later[index - 1]!;
        const page = await store.findSilentJobs(null, t0Ms + hourMs, 1,
          { silentSinceMs: previous.silentSinceMs, jobId: previous.job.jobId });
        assert.deepEqual(page.map((entry) => entry.job.jobId), [later[index]!.job.jobId], 'keyset paging continues after the key');
      }
      assert.deepEqual(await store.findSilentJobs(null, t0Ms + hourMs, 1,
        { silentSinceMs: later.at(-1)!.silentSinceMs, jobId: later.at(-1)!.job.jobId }), [], 'and ends');
      await store.cancelJob(null, otherTeam.jobId, t0Ms + hourMs);
      assert.ok(!(await store.findSilentJobs(null, t0Ms + 2 * hourMs, 100)).some((entry) => entry.job.jobId === otherTeam.jobId),
        'a cancelled job is not watched');
    }));

  void it('counts from the last success: a failure does not reset it, a success does', () =>
    withStore(open, async (store) => {
      const job = await createJob(store, { spec: { max_silence_s: 3_600 } });
      const silentIds = async (nowMs: number): Promise<string[]> =>
        (await store.findSilentJobs(null, nowMs, 100)).map((entry) => entry.job.jobId);
      const finish = async (atMs: number, status: 'succeeded' | 'failed'): Promise<void> => {
        await firePending(store, job, atMs);
        const leased = await leaseOne(store, atMs);
        assert.ok(leased !== undefined && leased.jobId === job.jobId);
        const done = await store.completeRun({ team: null, runId: leased.runId, fencingToken: leased.fencingToken,
          status, error: status === 'failed' ? 'boom' : null, result: null, nowMs: atMs + 1_000 });
        assert.ok(done.kind === 'completed');
      };
      await finish(t0Ms + minuteMs, 'succeeded');
      assert.deepEqual(await silentIds(t0Ms + hourMs), [], 'a success a minute in restarts the hour');
      const [silent] = await store.findSilentJobs(null, t0Ms + minuteMs + 1_000 + hourMs, 100);
      assert.equal(silent?.job.jobId, job.jobId);
      assert.equal(silent.lastSuccessAtMs, t0Ms + minuteMs + 1_000);
      assert.equal(silent.silentSinceMs, t0Ms + minuteMs + 1_000 + hourMs);
      await finish(t0Ms + 2 * minuteMs, 'failed');
      assert.deepEqual(await silentIds(t0Ms + minuteMs + 1_000 + hourMs), [job.jobId], 'a failure is not a success');
    }));
}
