// The scheduler node on a real SQLite file under the virtual clock: it fires at the fire
// time, keeps recurrence going, never fires a cancelled job, is fenced when another node
// takes its shards, repairs a broken chain, and fires late rather than never after a restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualClock } from '../../src/clock.js';
import { TicklerError } from '../../src/errors.js';
import { runIdOf } from '../../src/domain/identity.js';
import { timingDefaults, type TimingConfig } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { LeaseWaiters } from '../../src/service/lease-waiters.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { CreateJobOutcome, LeasedRun, Store, TimerWrite } from '../../src/store/store.js';
import type { JobRecord, JobSpec, RunRecord } from '../../src/domain/types.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';

const startMs = Date.parse('2026-11-29T00:00:00.000Z');
// Every one-shot timer counts as a herd here (`dispatchAheadMinTimers` 1), so that the tests
// of dispatching ahead need one job each; the herd threshold itself has its own test. A run
// written ahead is finished at its fire time here (`finishAheadDelayMs` 0); the default delay
// has its own test too.
const timing: TimingConfig = { ...timingDefaults, dispatchAheadMinTimers: 1, finishAheadDelayMs: 0 };

interface Harness {
  store: Store;
  clock: VirtualClock;
  metrics: Metrics;
  scheduler: Scheduler;
  path: string;
  cleanup(): Promise<void>;
}

async function harness(options: {
  path?: string; clock?: VirtualClock; nodeId?: string; force?: boolean; wrap?: (store: Store) => Store; timing?: TimingConfig;
} = {}): Promise<Harness> {
  const dir = options.path === undefined ? mkdtempSync(join(tmpdir(), 'tickler-scheduler-')) : null;
  const path = options.path ?? join(dir!, 'tickler.db');
  const clock = options.clock ?? new VirtualClock(startMs);
  const store = await openSqliteStore({ path });
  const metrics = new Metrics();
  const scheduler = new Scheduler({
    store: options.wrap?.(store) ?? store, clock, metrics, timing: options.timing ?? timing, logger: silentLogger(),
    nodeId: options.nodeId ?? 'node-a',
    forceFirstAcquire: options.force ?? false,
    fullReloadEveryRefreshes: 10, // as `tickler serve` runs the embedded store
  });
  await scheduler.start();
  return {
    store, clock, metrics, scheduler, path,
    cleanup: async () => {
      await scheduler.stop();
      await store.close();
      if (dir !== null) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A database file in a directory of its own, removed afterwards: for tests that restart a node on it. */
async function withDatabaseFile(fn: (path: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-restart-'));
  try {
    await fn(join(dir, 'tickler.db'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function counterValue(metrics: Metrics, name: string): Promise<number> {
  const metric = (await metrics.registry.getMetricsAsJSON()).find((entry) => entry.name === name);
  return (metric?.values ?? []).reduce((sum, value) => sum + Number(value.value), 0);
}

/**
 * A one-shot run dispatched ahead, as the default timing does: ready from its fire time,
 * written `dispatchAheadMs` before it (or at once, `writtenAtMs`, for one created nearer).
 */
function assertWrittenAhead(run: RunRecord | null, atMs: number, message: string, writtenAtMs = atMs - timing.dispatchAheadMs): void {
  assert.equal(run?.status, 'ready', message);
  assert.equal(run.readyAtMs, atMs, `${message}: ready from its fire time`);
  assert.equal(run.dispatchedAtMs, writtenAtMs, `${message}: written ahead`);
}

function lease(h: Harness, pool = 'default'): Promise<LeasedRun[]> {
  return h.store.leaseRuns({ team: null, pool, max: 10, leaseMs: 10_000, workerId: 'w1', nowMs: h.clock.nowMs() });
}

test('a one-shot run is written ahead of its time, leased only from it, and the job is done at it', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 90_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    await h.clock.advance(90_000 - timing.dispatchAheadMs - 1);
    assert.equal(await h.store.getRun(null, runIdOf(jobId, atMs)), null, 'nothing before the ahead window');
    await h.clock.advance(1);
    assertWrittenAhead(await h.store.getRun(null, runIdOf(jobId, atMs)), atMs, 'in the window');
    const pending = await h.store.getJob(null, jobId);
    assert.equal(pending?.state, 'active', 'the job is pending until its time');
    assert.equal(pending.nextFireAtMs, atMs);
    await h.clock.advance(timing.dispatchAheadMs - 1);
    assert.deepEqual(await lease(h), [], 'not leasable a millisecond before its time');
    await h.clock.advance(1);
    const leased = await lease(h);
    assert.deepEqual(leased.map((run) => run.runId), [runIdOf(jobId, atMs)]);
    const done = await h.store.getJob(null, jobId);
    assert.equal(done?.state, 'done');
    assert.equal(done.nextFireAtMs, null);
    const events = (await h.store.getRun(null, runIdOf(jobId, atMs)))?.events ?? [];
    assert.deepEqual(events.map((event) => event.type), ['dispatched', 'leased']);
    assert.equal((events[0]!.detail as { ahead?: boolean }).ahead, true, 'the ledger says it was written ahead');
  } finally {
    await h.cleanup();
  }
});

test('by default a job whose run was written ahead is finished finishAheadDelayMs after its time; its run is leasable from its time', async () => {
  const delayMs = timingDefaults.finishAheadDelayMs;
  const h = await harness({ timing: { ...timing, finishAheadDelayMs: delayMs } });
  try {
    const atMs = startMs + 90_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    await h.clock.advance(90_000);
    assert.deepEqual((await lease(h)).map((run) => run.runId), [runIdOf(jobId, atMs)], 'leasable at its time');
    await h.clock.advance(delayMs - 1);
    const pending = await h.store.getJob(null, jobId);
    assert.deepEqual([pending?.state, pending?.nextFireAtMs], ['active', atMs], 'not finished before the delay');
    await h.clock.advance(1);
    const done = await h.store.getJob(null, jobId);
    assert.deepEqual([done?.state, done?.nextFireAtMs], ['done', null], 'finished after it');
    const runs = await h.store.listRuns({ team: null, jobId, limit: 10 });
    assert.equal(runs.items.length, 1, 'the finish wrote no second run');
  } finally {
    await h.cleanup();
  }
});

test('a long-poll parked before a run is written ahead is answered at its fire time, not at its job\'s finish', async () => {
  const h = await harness({ timing: { ...timing, finishAheadDelayMs: timingDefaults.finishAheadDelayMs } });
  const waiters = new LeaseWaiters(h.store, h.clock, silentLogger());
  try {
    const atMs = startMs + 90_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    // Waits up to 5 s of real time: the run must come from the virtual clock's advance, not the timeout.
    const parked = waiters.lease({ scope: null, pool: 'default', max: 1, leaseMs: 10_000, workerId: 'w1', aheadMs: 0, waitMs: 5_000 });
    for (let turn = 0; turn < 100 && waiters.waitingCount() === 0; turn++) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(waiters.waitingCount(), 1, 'parked before the run is written ahead');
    await h.clock.advance(90_000);
    const runs = await parked;
    assert.deepEqual(runs.map((run) => [run.runId, run.readyAtMs]), [[runIdOf(outcome!.job.jobId, atMs), atMs]]);
    assert.equal((await h.store.getJob(null, outcome!.job.jobId))?.state, 'active', 'leased before its job\'s finish');
  } finally {
    waiters.close();
    await h.cleanup();
  }
});

test('with dispatching ahead off, a one-shot timer fires at its time, not before, and the job is done', async () => {
  const h = await harness({ timing: { ...timing, dispatchAheadMs: 0 } });
  try {
    const atMs = startMs + 90_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    assert.equal(outcome!.kind, 'created');
    const jobId = outcome!.job.jobId;
    await h.clock.advance(89_999);
    assert.equal(await h.store.getRun(null, runIdOf(jobId, atMs)), null, 'nothing before its time');
    await h.clock.advance(1);
    const run = await h.store.getRun(null, runIdOf(jobId, atMs));
    assert.equal(run?.status, 'ready');
    assert.equal(run?.dispatchedAtMs, atMs);
    assert.equal((await h.store.getJob(null, jobId))?.state, 'done');
  } finally {
    await h.cleanup();
  }
});

test('a recurring job fires every occurrence and always has exactly one next timer (invariant 3)', async () => {
  const h = await harness();
  try {
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ cron: '*/10 * * * * *', tz: 'UTC' }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    await h.clock.advance(60_000);
    const runs = await h.store.listRuns({ team: null, jobId, limit: 100 });
    const scheduled = runs.items.map((run) => run.scheduledAtMs).sort((a, b) => a - b);
    assert.deepEqual(scheduled, [1, 2, 3, 4, 5, 6].map((n) => startMs + n * 10_000));
    const job = await h.store.getJob(null, jobId);
    assert.equal(job?.nextScheduledAtMs, startMs + 70_000);
    assert.equal(await h.store.countJobsWithoutTimer(), 0);
  } finally {
    await h.cleanup();
  }
});

test('a job cancelled after its timer was wheeled and its run written ahead never fires (invariant 7)', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 5_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    assert.equal(h.scheduler.status().wheelTimers, 1, 'the near-timer path put it in the wheel');
    // Due within the ahead window, so its run is written at once, ready from its time.
    await h.clock.advance(0);
    assertWrittenAhead(await h.store.getRun(null, runIdOf(jobId, atMs)), atMs, 'written ahead', startMs);
    await h.store.cancelJob(null, jobId, startMs + 1_000);
    await h.clock.advance(10_000);
    assert.deepEqual(await lease(h), [], 'never leasable');
    const run = await h.store.getRun(null, runIdOf(jobId, atMs));
    assert.equal(run?.status, 'cancelled', 'taken back with the job, before it came due');
    assert.deepEqual(run.events?.map((event) => [event.type, event.toStatus]), [['dispatched', 'ready'], ['cancelled', 'cancelled']]);
    assert.equal(await counterValue(h.metrics, 'tickler_dispatch_timer_gone_total'), 1, 'its finish found the timer gone');
  } finally {
    await h.cleanup();
  }
});

test('a node whose shards were taken is fenced at the sink and counts it (invariant 2)', async () => {
  // Ahead by 2 s, the timer due in 2.5 s is written no sooner than 0.5 s from now: both of a's
  // writes (ahead, then at its time) come after b takes the shards, and before a's first renewal
  // (3 s) would tell it so.
  const aheadTiming: TimingConfig = { ...timing, dispatchAheadMs: 2_000 };
  const a = await harness({ nodeId: 'node-a', timing: aheadTiming });
  const b = await harness({ path: a.path, clock: a.clock, nodeId: 'node-b', timing: aheadTiming });
  try {
    assert.equal(a.scheduler.status().shardsOwned, 1024);
    assert.equal(b.scheduler.status().shardsOwned, 0, 'a live holder keeps its shards');
    const atMs = startMs + 2_500;
    const [outcome] = await a.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    // Node b takes every shard by force while a still has the timer in its wheel and still
    // believes its lease valid: a zombie. Its dispatch must be rejected by the token check.
    const taken = await b.store.acquireShardLeases('node-b', Array.from({ length: 1024 }, (_, shard) => shard),
      timing.shardLeaseTtlMs, startMs, { force: true });
    const runBefore = await a.store.getRun(null, runIdOf(jobId, atMs));
    assert.equal(runBefore, null);
    await a.clock.advance(atMs - startMs);
    assert.ok(await counterValue(a.metrics, 'tickler_dispatch_rejected_stale_token_total') >= 1);
    // Node b may fire it meanwhile, as the shard's rightful owner; the zombie's write never lands.
    const run = await a.store.getRun(null, runIdOf(jobId, atMs));
    const takenToken = taken.find((lease) => lease.shard === outcome!.job.shard)!.token;
    for (const event of run?.events ?? []) {
      if (event.type !== 'dispatched') continue;
      const writtenToken = BigInt(String(event.detail?.['shard_token']));
      assert.ok(writtenToken >= BigInt(takenToken), `the zombie wrote nothing: written under ${writtenToken}, b took ${takenToken}`);
    }
  } finally {
    await b.cleanup();
    await a.cleanup();
  }
});

test('occurrences due between a job\'s create and its first timer reaching the wheel fire late; none is called an outage', async () => {
  // A create whose commit took 3.4 s (a big batch): its every-second job's first timer
  // (created+1 s) reached the wheel with three occurrences due, the scheduler up throughout.
  const h = await harness();
  try {
    const createdAtMs = startMs + 10_000;
    await h.clock.advance(13_400);
    const input = jobInput(jobSpec({ cron: '* * * * * *', tz: 'UTC' }, { overlap: 'forbid', catch_up: 'latest' }), createdAtMs);
    const [outcome] = await h.store.createJobs([input], h.clock.nowMs());
    await h.clock.advance(1_000);
    const runs = (await h.store.listRuns({ team: null, jobId: outcome!.job.jobId, limit: 100 })).items
      .sort((a, b) => a.scheduledAtMs - b.scheduledAtMs);
    assert.deepEqual(runs.map((run) => [(run.scheduledAtMs - startMs) / 1_000, run.status]),
      // 12 and 13 queue behind 11 (held: written late, they never found the job busy at their
      // time); 14, on time, finds 11 (written at 13.4 s, no worker) active: forbid skips it.
      [[11, 'ready'], [12, 'ready'], [13, 'ready'], [14, 'skipped_overlap']]);
    assert.ok(runs.every((run) => run.status !== 'skipped_outage'));
  } finally {
    await h.cleanup();
  }
});

test('timers due while no scheduler ran fire late, not never, after a restart', () => withDatabaseFile(async (path) => {
  const first = await harness({ path, nodeId: 'node-a' });
  const atMs = startMs + 60_000;
  const [outcome] = await first.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
  const jobId = outcome!.job.jobId;
  await first.cleanup();
  const later = new VirtualClock(startMs + 3_600_000);
  const second = await harness({ path, clock: later, nodeId: 'node-a2' });
  try {
    await later.advance(0);
    const run = await second.store.getRun(null, runIdOf(jobId, atMs));
    assert.equal(run?.status, 'ready');
    assert.equal(run?.dispatchedAtMs, startMs + 3_600_000);
  } finally {
    await second.cleanup();
  }
}));

test('the reconciler gives an active recurring job without a timer its next one back', async () => {
  const h = await harness();
  try {
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ cron: '0 * * * *', tz: 'UTC' }), startMs)], startMs);
    const job = outcome!.job;
    // Break the chain the way a bug would: the job stays active, its timer is gone.
    const broken = await h.store.changeJob({ team: null, jobId: job.jobId, expectedVersion: job.version, timer: null, nowMs: startMs });
    assert.equal(broken.kind, 'changed');
    assert.equal(await h.store.countJobsWithoutTimer(), 1);
    await h.clock.advance(timing.reconcileIntervalMs);
    assert.equal(await h.store.countJobsWithoutTimer(), 0);
    assert.equal(await counterValue(h.metrics, 'tickler_reconciler_repairs_total'), 1);
    await h.clock.advance(3_600_000);
    const runs = await h.store.listRuns({ team: null, jobId: job.jobId, limit: 10 });
    assert.equal(runs.items.length, 1, 'and it fires again');
  } finally {
    await h.cleanup();
  }
});

test('an expired worker lease re-offers the run as the next attempt', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 1_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    await h.clock.advance(1_000);
    const [leased] = await h.store.leaseRuns({ team: null, pool: 'default', max: 1, leaseMs: 10_000, workerId: 'w1', nowMs: h.clock.nowMs() });
    assert.equal(leased?.attempt, 1);
    h.scheduler.noteRunDeadline(leased!.leaseExpiresAtMs);
    await h.clock.advance(10_000);
    const run = await h.store.getRun(null, runIdOf(outcome!.job.jobId, atMs));
    assert.equal(run?.status, 'ready');
    const [again] = await h.store.leaseRuns({ team: null, pool: 'default', max: 1, leaseMs: 10_000, workerId: 'w2', nowMs: h.clock.nowMs() });
    assert.equal(again?.attempt, 2);
    assert.notEqual(again?.fencingToken, leased?.fencingToken);
  } finally {
    await h.cleanup();
  }
});

test('a wake with nothing due (its timer went with a lost shard) does not stop later firing', async () => {
  const a = await harness({ nodeId: 'node-a' });
  try {
    const first = jobInput(jobSpec({ at: new Date(startMs + 5_000).toISOString() }), startMs);
    await a.store.createJobs([first], startMs);
    // Another node takes every shard for one TTL; node a loses them at its next renewal and
    // drops the wheeled timer, so its wake at +5 s finds nothing due.
    await a.store.acquireShardLeases('node-b', Array.from({ length: 1024 }, (_, shard) => shard),
      timing.shardLeaseTtlMs, startMs, { force: true });
    await a.clock.advance(6_000);
    assert.equal(a.scheduler.status().shardsOwned, 0);
    // Node b's leases run out unrenewed; node a takes the shards back and must fire again.
    await a.clock.advance(timing.shardLeaseTtlMs + timing.shardLeaseRenewIntervalMs);
    assert.equal(a.scheduler.status().shardsOwned, 1024);
    const laterAtMs = a.clock.nowMs() + 5_000;
    const [later] = await a.store.createJobs([jobInput(jobSpec({ at: new Date(laterAtMs).toISOString() }), a.clock.nowMs())], a.clock.nowMs());
    await a.clock.advance(5_000);
    assert.equal((await a.store.getRun(null, runIdOf(later!.job.jobId, laterAtMs)))?.status, 'ready');
    assert.equal((await a.store.getRun(null, runIdOf(first.job.jobId, startMs + 5_000)))?.status, 'ready',
      'the first timer fires late, once its shard is owned again');
  } finally {
    await a.cleanup();
  }
});

/** A harness whose store refuses shard lease renewals while `renewals.fail` is set. */
function harnessWithRenewals(renewals: { fail: boolean }, timingOfTest = timing): Promise<Harness> {
  return harness({
    timing: timingOfTest,
    wrap: (store) => new Proxy(store, {
      get(target, property, receiver) {
        if (property === 'renewShardLeases' && renewals.fail) {
          return () => Promise.reject(new TicklerError('unavailable', 'renewal refused by the test'));
        }
        const value: unknown = Reflect.get(target, property, receiver);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }),
  });
}

test('a timer held back while the lease renewal is late fires once it lands, not at the next refresh', async () => {
  // Renewals fail for a while (a loaded machine, a slow database): the node keeps its shards
  // but its local check stops it firing. The due timer must wait in the wheel, not be dropped
  // until the loader's next refresh (30 s later).
  const renewals = { fail: false };
  // The timer must come due past the local deadline: not wheeled early.
  const h = await harnessWithRenewals(renewals, { ...timing, dispatchAheadMs: 0 });
  try {
    // Leases were granted at startMs: firing stops at TTL − margin = 8 s; renewals run every 3 s.
    const atMs = startMs + 9_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)], startMs);
    const jobId = outcome!.job.jobId;
    renewals.fail = true;
    await h.clock.advance(10_000);
    assert.equal(await h.store.getRun(null, runIdOf(jobId, atMs)), null, 'not fired past the local deadline');
    assert.ok(await counterValue(h.metrics, 'tickler_dispatch_skipped_local_lease_expired_total') >= 1);
    assert.equal(h.scheduler.status().shardsOwned, 1024, 'the shards are still held');
    renewals.fail = false;
    await h.clock.advance(3_000);
    const run = await h.store.getRun(null, runIdOf(jobId, atMs));
    assert.equal(run?.status, 'ready');
    const firedAtMs = run.dispatchedAtMs ?? Infinity;
    assert.ok(firedAtMs <= startMs + 12_200, `fired at +${firedAtMs - startMs} ms, just after the renewal at +12 s`);
  } finally {
    await h.cleanup();
  }
});

test('a timer created while the lease renewal is late is wheeled all the same, and fires once it lands', async () => {
  // The near-timer path admits a timer for a shard the node holds, whether or not it may fire
  // right now: dropped, it would wait for a whole-window reload (every tenth refresh, 5 min).
  const renewals = { fail: false };
  const h = await harnessWithRenewals(renewals);
  try {
    renewals.fail = true;
    await h.clock.advance(8_500); // past the local firing deadline (TTL − margin = 8 s)
    const atMs = startMs + 11_000;
    const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), h.clock.nowMs())],
      h.clock.nowMs());
    assert.equal(h.scheduler.status().wheelTimers, 1, 'wheeled although firing is paused');
    renewals.fail = false;
    await h.clock.advance(6_000);
    assert.equal((await h.store.getRun(null, runIdOf(outcome!.job.jobId, atMs)))?.status, 'ready');
  } finally {
    await h.cleanup();
  }
});

test('timers beyond the load horizon come in with the incremental refreshes, and fire on time', async () => {
  const h = await harness();
  try {
    const dueMs = [400_000, 900_000, 3_600_000].map((offsetMs) => startMs + offsetMs);
    const created = await h.store.createJobs(dueMs.map((atMs) => jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)), startMs);
    assert.equal(h.scheduler.status().wheelTimers, 0, 'none is near: the wheel holds only the load window');
    await h.clock.advance(3_600_000);
    for (const [index, outcome] of created.entries()) {
      assertWrittenAhead(await h.store.getRun(null, runIdOf(outcome.job.jobId, dueMs[index]!)), dueMs[index]!,
        `timer ${index} fires at its time`);
    }
  } finally {
    await h.cleanup();
  }
});

test('the loader gives the event loop a turn between pages, and its first refresh reads only what the window gained', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-scheduler-pages-'));
  const path = join(dir, 'tickler.db');
  // 2,500 timers in the load window before the node starts: its first acquire loads them in 3 pages.
  const seed = await openSqliteStore({ path });
  const inputs = Array.from({ length: 2_500 }, (_, index) =>
    jobInput(jobSpec({ at: new Date(startMs + 60_000 + index).toISOString() }), startMs));
  assert.ok((await seed.createJobs(inputs, startMs)).every((outcome) => outcome.kind === 'created'));
  await seed.close();

  // Turns of the event loop, counted by a setImmediate chain; each page records the count.
  let turns = 0;
  let ticking = true;
  const tick = (): void => {
    turns++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const pages: { turn: number; incremental: boolean }[] = [];
  const h = await harness({
    path,
    wrap: (store) => new Proxy(store, {
      get(target, property, receiver) {
        if (property !== 'loadTimers') return Reflect.get(target, property, receiver) as unknown;
        return async (query: Parameters<Store['loadTimers']>[0]) => {
          pages.push({ turn: turns, incremental: query.after !== undefined });
          return target.loadTimers(query);
        };
      },
    }),
  });
  try {
    // The first acquire's load runs in the background of start(): let it finish.
    for (let turn = 0; turn < 1_000 && pages.length < 3; turn++) await new Promise((resolve) => setImmediate(resolve));
    for (let turn = 0; turn < 100 && h.scheduler.status().wheelTimers < 2_500; turn++) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.equal(h.scheduler.status().wheelTimers, 2_500);
    const initial = pages.slice(0, 3);
    assert.equal(initial.length, 3, 'three pages of 1,000');
    assert.ok(initial[1]!.turn > initial[0]!.turn && initial[2]!.turn > initial[1]!.turn,
      `a turn of the loop between pages: ${JSON.stringify(initial)}`);
    const before = pages.length;
    await h.clock.advance(timing.loadRefreshIntervalMs);
    const refresh = pages.slice(before);
    assert.ok(refresh.length >= 1, 'the refresh ran');
    assert.ok(refresh.every((page) => page.incremental), 'the first refresh after a whole load is incremental');
  } finally {
    ticking = false;
    await h.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('when the store says near-timer announcements may have been lost, the loader rereads its whole window', async () => {
  let announceMissed: () => void = () => assert.fail('the scheduler did not listen for missed announcements');
  const queries: { incremental: boolean }[] = [];
  const h = await harness({
    wrap: (store) => new Proxy(store, {
      get(target, property, receiver) {
        // Every announcement is lost on the way, as while a LISTEN connection is down.
        if (property === 'onNearTimers') return () => () => undefined;
        if (property === 'onNearTimersMissed') {
          return (listener: () => void) => {
            announceMissed = listener;
            return () => undefined;
          };
        }
        if (property === 'loadTimers') {
          return async (query: Parameters<Store['loadTimers']>[0]) => {
            queries.push({ incremental: query.after !== undefined });
            return target.loadTimers(query);
          };
        }
        return Reflect.get(target, property, receiver) as unknown;
      },
    }),
  });
  try {
    await h.clock.advance(timing.loadRefreshIntervalMs);
    assert.ok(queries.length > 0 && queries[queries.length - 1]!.incremental, 'refreshes read only what the window gained');
    // Further off than dispatchAheadMs, so the run is written ahead at its own lead once found.
    const atMs = h.clock.nowMs() + timing.dispatchAheadMs + 10_000;
    const [created] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }), h.clock.nowMs())],
      h.clock.nowMs());
    assert.equal(h.scheduler.status().wheelTimers, 0, 'its announcement was lost');
    const before = queries.length;
    announceMissed();
    await h.clock.advance(1_000);
    const after = queries.slice(before);
    assert.ok(after.length > 0 && after.every((query) => !query.incremental), 'a whole reread, within a second');
    await h.clock.advance(atMs - h.clock.nowMs());
    assertWrittenAhead(await h.store.getRun(null, runIdOf(created!.job.jobId, atMs)), atMs, 'found, and fired on time');
  } finally {
    await h.cleanup();
  }
});

// Dispatching a one-shot job ahead (Store.writeRunsAhead, then Store.finishAhead): what a
// change to the job between the run's write and its fire time does to that run, on the
// embedded store.

async function createOneShot(h: Harness, atMs: number, overrides: Partial<JobSpec> = {}): Promise<JobRecord> {
  const [outcome] = await h.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }, overrides), h.clock.nowMs())],
    h.clock.nowMs());
  assert.equal(outcome!.kind, 'created');
  return outcome!.job;
}

/** A PATCH as the service makes it: the new spec, and a new timer when the timing changed. */
async function patchJob(h: Harness, job: JobRecord, spec: JobSpec, timer: TimerWrite | 'keep'): Promise<JobRecord> {
  const current = (await h.store.getJob(null, job.jobId))!;
  const outcome = await h.store.changeJob({
    team: null, jobId: job.jobId, expectedVersion: current.version, spec, timer, nowMs: h.clock.nowMs(),
  });
  assert.equal(outcome.kind, 'changed');
  return (outcome as { job: JobRecord }).job;
}

test('cancelling many jobs, or by key prefix, takes back their runs written ahead; a run already due stays', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 3_000;
    const [first, second, third] = [
      await createOneShot(h, atMs, { key: 'cart-1' }), await createOneShot(h, atMs, { key: 'cart-2' }),
      await createOneShot(h, startMs + 1_000, { key: 'cart-3' }),
    ];
    await h.clock.advance(1_000);
    assert.deepEqual((await lease(h)).map((run) => run.runId), [runIdOf(third!.jobId, startMs + 1_000)], 'the third came due');
    assert.deepEqual((await h.store.cancelJobs(null, [first!.jobId], h.clock.nowMs())).map((job) => job?.state), ['cancelled']);
    assert.equal(await h.store.cancelJobsByKeyPrefix('default', 'cart-', h.clock.nowMs()), 2);
    await h.clock.advance(5_000);
    assert.deepEqual(await lease(h), [], 'neither cancelled run is ever leased');
    for (const job of [first!, second!]) {
      const run = await h.store.getRun(null, runIdOf(job.jobId, atMs));
      assert.equal(run?.status, 'cancelled');
      assert.match(String((run.events?.at(-1)?.detail as { reason?: string }).reason), /cancelled before the run came due/);
    }
    assert.equal((await h.store.getRun(null, runIdOf(third!.jobId, startMs + 1_000)))?.status, 'running',
      'the run that came due before the cancel is left to its worker');
  } finally {
    await h.cleanup();
  }
});

test('a PATCH to a later time takes the run written ahead back, and the new occurrence fires at its own time', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 3_000;
    const laterMs = startMs + 20_000;
    const job = await createOneShot(h, atMs);
    await h.clock.advance(1);
    assertWrittenAhead(await h.store.getRun(null, runIdOf(job.jobId, atMs)), atMs, 'first occurrence', startMs);
    await patchJob(h, job, jobSpec({ at: new Date(laterMs).toISOString() }), { fireAtMs: laterMs, scheduledAtMs: laterMs });
    assert.equal((await h.store.getRun(null, runIdOf(job.jobId, atMs)))?.status, 'cancelled');
    await h.clock.advance(laterMs - h.clock.nowMs() - 1);
    assert.deepEqual(await lease(h), [], 'nothing leasable before the new time');
    assertWrittenAhead(await h.store.getRun(null, runIdOf(job.jobId, laterMs)), laterMs, 'new occurrence');
    await h.clock.advance(1);
    assert.deepEqual((await lease(h)).map((run) => run.runId), [runIdOf(job.jobId, laterMs)]);
    assert.equal((await h.store.getJob(null, job.jobId))?.state, 'done');
  } finally {
    await h.cleanup();
  }
});

test('a PATCH that keeps the occurrence moves its run written ahead: a new pool at once, a new fire time with its timer', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 4_000;
    const job = await createOneShot(h, atMs);
    await h.clock.advance(1);
    const runId = runIdOf(job.jobId, atMs);
    // The pool changes, the timing does not: the timer is kept, the run moves pool.
    await patchJob(h, job, jobSpec({ at: new Date(atMs).toISOString() }, { pool: 'billing' }), 'keep');
    // Then the same `at` with jitter (tolerance): the same occurrence (run id) at a new fire time.
    const fireAtMs = atMs + 700;
    await patchJob(h, job, jobSpec({ at: new Date(atMs).toISOString() }, { pool: 'billing', tolerance_s: 1 }),
      { fireAtMs, scheduledAtMs: atMs });
    const moved = await h.store.getRun(null, runId);
    assert.equal(moved?.status, 'ready');
    assert.equal(moved.pool, 'billing');
    assert.equal(moved.fireAtMs, fireAtMs);
    assert.equal(moved.readyAtMs, fireAtMs);
    assert.deepEqual(moved.events?.map((event) => event.type), ['dispatched', 'changed', 'changed']);
    await h.clock.advance(fireAtMs - h.clock.nowMs() - 1);
    assert.deepEqual(await lease(h, 'billing'), [], 'not before its new fire time');
    assert.equal((await h.store.getJob(null, job.jobId))?.state, 'active');
    await h.clock.advance(1);
    assert.deepEqual(await lease(h, 'default'), [], 'gone from its old pool');
    assert.deepEqual((await lease(h, 'billing')).map((run) => run.runId), [runId]);
    assert.equal((await h.store.getJob(null, job.jobId))?.state, 'done', 'the moved timer only finished the job');
    assert.equal((await h.store.listRuns({ team: null, limit: 10 })).items.length, 1, 'one run: the occurrence was not written twice');
  } finally {
    await h.cleanup();
  }
});

test('a node restarted between a run written ahead and its fire time finishes the job, writing no second run',
  () => withDatabaseFile(async (path) => {
    const clock = new VirtualClock(startMs);
    const first = await harness({ path, clock });
    const atMs = startMs + 4_000;
    const job = await createOneShot(first, atMs);
    await clock.advance(1);
    assertWrittenAhead(await first.store.getRun(null, runIdOf(job.jobId, atMs)), atMs, 'before the restart', startMs);
    await first.cleanup();
    const second = await harness({ path, clock, force: true });
    try {
      await clock.advance(atMs - clock.nowMs());
      assert.equal((await second.store.getJob(null, job.jobId))?.state, 'done');
      assert.deepEqual((await lease(second)).map((run) => run.runId), [runIdOf(job.jobId, atMs)]);
      assert.equal(await counterValue(second.metrics, 'tickler_dispatch_duplicates_total'), 0);
    } finally {
      await second.cleanup();
    }
  }));

test('a one-shot job with an active run is fired whole at its time: overlap is judged then, not ahead', async () => {
  const h = await harness();
  try {
    const atMs = startMs + 4_000;
    const job = await createOneShot(h, atMs, { overlap: 'forbid' });
    const triggered = await h.store.triggerJob(null, job.jobId, startMs);
    assert.equal(triggered?.status, 'ready');
    await h.clock.advance(1);
    assert.equal(await h.store.getRun(null, runIdOf(job.jobId, atMs)), null, 'not written ahead beside an active run');
    const [leased] = await lease(h);
    await h.store.completeRun({ team: null, runId: leased!.runId, fencingToken: leased!.fencingToken, status: 'succeeded',
      error: null, result: null,
      nowMs: h.clock.nowMs() });
    await h.clock.advance(atMs - h.clock.nowMs());
    const run = await h.store.getRun(null, runIdOf(job.jobId, atMs));
    assert.equal(run?.status, 'ready', 'the earlier run ended before the fire time, so the occurrence runs');
    assert.equal(run.dispatchedAtMs, atMs);
    assert.equal((await h.store.getJob(null, job.jobId))?.state, 'done');
  } finally {
    await h.cleanup();
  }
});

test('a bigger herd is written further ahead, in chunks of dispatchAheadTimersPerSecond a second, up to twice dispatchAheadMs', async () => {
  // 10 timers a second of extra lead: the 25 of one tick are wheeled 10 s ahead (the first 9),
  // 11 s (the next 10) and 12 s (the last 6); in a tick of 250, those from the 100th on are
  // capped at 20 s.
  const h = await harness({ timing: { ...timing, dispatchAheadMinTimers: 16, dispatchAheadTimersPerSecond: 10 } });
  try {
    const herdAtMs = startMs + 60_000;
    const bigAtMs = startMs + 90_000;
    const create = (atMs: number, count: number): Promise<CreateJobOutcome[]> => h.store.createJobs(Array.from({ length: count }, () =>
      jobInput(jobSpec({ at: new Date(atMs).toISOString() }), startMs)), startMs);
    const herd = await create(herdAtMs, 25);
    const big = await create(bigAtMs, 250);
    const writtenAhead = async (outcomes: readonly CreateJobOutcome[], atMs: number): Promise<number> => {
      const runs = await Promise.all(outcomes.map((outcome) => h.store.getRun(null, runIdOf(outcome.job.jobId, atMs))));
      for (const run of runs) if (run !== null) assert.equal(run.readyAtMs, atMs, 'ready from its fire time');
      return runs.filter((run) => run !== null).length;
    };
    const advanceTo = (atMs: number): Promise<number> => h.clock.advance(atMs - h.clock.nowMs());
    await advanceTo(herdAtMs - 12_001);
    assert.equal(await writtenAhead(herd, herdAtMs), 0, 'nothing more than 12 s ahead');
    await advanceTo(herdAtMs - 12_000);
    assert.equal(await writtenAhead(herd, herdAtMs), 6, 'the last 6 wheeled, 12 s ahead');
    await advanceTo(herdAtMs - 11_000);
    assert.equal(await writtenAhead(herd, herdAtMs), 16, 'the next 10, 11 s ahead');
    await advanceTo(herdAtMs - timing.dispatchAheadMs);
    assert.equal(await writtenAhead(herd, herdAtMs), 25, 'the first 9 at dispatchAheadMs, as any herd');

    await advanceTo(bigAtMs - 2 * timing.dispatchAheadMs - 1);
    assert.equal(await writtenAhead(big, bigAtMs), 0, 'never more than twice dispatchAheadMs ahead');
    await advanceTo(bigAtMs - 2 * timing.dispatchAheadMs);
    assert.equal(await writtenAhead(big, bigAtMs), 250 - 99, 'those wheeled from the 100th on, capped at twice dispatchAheadMs');
    await advanceTo(bigAtMs - timing.dispatchAheadMs);
    assert.equal(await writtenAhead(big, bigAtMs), 250);
    await advanceTo(bigAtMs);
    assert.equal((await lease(h)).length, 10, 'leasable from their fire time');
  } finally {
    await h.cleanup();
  }
});

test('only a herd is dispatched ahead: a timer alone in its tick waits for its own time, as before', async () => {
  const h = await harness({ timing: { ...timing, dispatchAheadMinTimers: timingDefaults.dispatchAheadMinTimers } });
  try {
    const herdAtMs = startMs + 60_000;
    const aloneAtMs = startMs + 60_020; // two wheel ticks later
    const herd = await h.store.createJobs(Array.from({ length: timingDefaults.dispatchAheadMinTimers }, () =>
      jobInput(jobSpec({ at: new Date(herdAtMs).toISOString() }), startMs)), startMs);
    const alone = await createOneShot(h, aloneAtMs);
    await h.clock.advance(60_000 - timing.dispatchAheadMs);
    for (const outcome of [herd[0]!, herd.at(-1)!]) {
      assertWrittenAhead(await h.store.getRun(null, runIdOf(outcome.job.jobId, herdAtMs)), herdAtMs, 'a herd member');
    }
    assert.equal(await h.store.getRun(null, runIdOf(alone.jobId, aloneAtMs)), null, 'the lone timer is not written ahead');
    await h.clock.advance(timing.dispatchAheadMs + 20);
    const run = await h.store.getRun(null, runIdOf(alone.jobId, aloneAtMs));
    assert.equal(run?.dispatchedAtMs, aloneAtMs, 'fired whole at its time');
    assert.equal((await h.store.getJob(null, alone.jobId))?.state, 'done');
    assert.equal((await h.store.getJob(null, herd[0]!.job.jobId))?.state, 'done');
  } finally {
    await h.cleanup();
  }
});

test('a timer at its fire time goes before a herd\'s early work taken out of the wheel in the same pass', async () => {
  const calls: { call: 'dispatch' | 'writeRunsAhead'; jobIds: string[] }[] = [];
  const h = await harness({
    timing: { ...timing, dispatchAheadMinTimers: timingDefaults.dispatchAheadMinTimers },
    wrap: (store) => new Proxy(store, {
      get(target, property, receiver) {
        if (property === 'dispatch') {
          return async (items: Parameters<Store['dispatch']>[0], nowMs: number) => {
            calls.push({ call: property, jobIds: items.map((item) => item.jobId) });
            return target.dispatch(items, nowMs);
          };
        }
        if (property === 'writeRunsAhead') {
          return async (items: Parameters<Store['writeRunsAhead']>[0], nowMs: number) => {
            calls.push({ call: property, jobIds: items.map((item) => item.jobId) });
            return target.writeRunsAhead(items, nowMs);
          };
        }
        return Reflect.get(target, property, receiver) as unknown;
      },
    }),
  });
  try {
    // 600 one-shots due at +30 s: a herd, written ahead from +20 s (more than one batch of 512).
    // A lone one-shot due at +20.005 s is fired whole at its time. One virtual advance wakes the
    // scheduler once for both (its virtual batch window), so one pass takes them together.
    const herdAtMs = startMs + 30_000;
    const herd = await h.store.createJobs(Array.from({ length: 600 }, () =>
      jobInput(jobSpec({ at: new Date(herdAtMs).toISOString() }), startMs)), startMs);
    const aloneAtMs = startMs + 20_005;
    const alone = await createOneShot(h, aloneAtMs);
    await h.clock.advance(20_010);
    const withAlone = calls.findIndex((call) => call.jobIds.includes(alone.jobId));
    const firstAhead = calls.findIndex((call) => call.call === 'writeRunsAhead');
    assert.ok(withAlone >= 0 && firstAhead >= 0, `dispatched: ${JSON.stringify(calls.map((call) => call.jobIds.length))}`);
    assert.ok(withAlone < firstAhead, `the timer at its time went in store call ${withAlone}, the early work from call ${firstAhead}`);
    assert.equal(calls[withAlone]!.call, 'dispatch');
    assert.equal(calls[withAlone]!.jobIds[0], alone.jobId, 'first in its call');
    const run = await h.store.getRun(null, runIdOf(alone.jobId, aloneAtMs));
    assert.equal(run?.dispatchedAtMs, aloneAtMs, 'fired whole at its time, when the pass woke');
    // The herd was written ahead all the same, every member once.
    const aheadJobIds = calls.flatMap((call) => (call.call === 'writeRunsAhead' ? call.jobIds : []));
    assert.equal(new Set(aheadJobIds).size, herd.length);
    assertWrittenAhead(await h.store.getRun(null, runIdOf(herd.at(-1)!.job.jobId, herdAtMs)), herdAtMs, 'the herd\'s last', aloneAtMs);
  } finally {
    await h.cleanup();
  }
});
