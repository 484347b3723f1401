// Fixtures of the store conformance suite: job records, shard ownership and dispatch items
// built directly against the Store contract, with no schedule code in between, so the suite
// tests the store alone and runs unchanged against every implementation.
import assert from 'node:assert/strict';
import { newJobId, runIdOf, sha256Hex, shardOf } from '../../src/domain/identity.js';
import type { JobRecord, JobSpec } from '../../src/domain/types.js';
import type {
  DispatchItem, DispatchResult, LeasedRun, LoadedTimer, OccurrenceWrite, ShardLease, Store, TimerWrite,
} from '../../src/store/store.js';

export interface StoreHandle {
  store: Store;
  cleanup(): Promise<void>;
  /**
   * A second, independent store instance on the same database (another connection or
   * process), for the racing tests; those tests are skipped, saying so, without it.
   */
  openPeer?: () => Promise<Store>;
}

export type OpenStore = () => Promise<StoreHandle>;

/** A fixed instant: the store never reads a clock, so the suite never needs the real one. */
export const t0Ms = Date.UTC(2026, 10, 29, 2, 0, 0);
export const minuteMs = 60_000;
export const defaultTeam = 'team-a';
export const leaseTtlMs = 10_000;

export function jobSpec(overrides: Partial<JobSpec> = {}): JobSpec {
  return {
    key: null,
    schedule: { cron: '* * * * *', tz: 'UTC' },
    pool: 'pool-a',
    payload: { hello: 'world' },
    lane: 'P1',
    tolerance_s: 0,
    retry: { max_attempts: 3, base_s: 10, max_s: 100 },
    overlap: 'allow',
    catch_up: 'latest',
    catch_up_window_s: 86_400,
    dst: { gap: 'shift', repeat: 'first' },
    idempotency: 'keyed',
    lease_s: 30,
    max_silence_s: null,
    resources: [],
    labels: {},
    ...overrides,
  };
}

export function jobRecord(spec: JobSpec, nowMs: number, team = defaultTeam, requestHash?: string): JobRecord {
  const jobId = newJobId(nowMs);
  return {
    jobId, team, state: 'active', spec, requestHash: requestHash ?? sha256Hex(JSON.stringify(spec)),
    shard: shardOf(jobId), version: 1, nextFireAtMs: null, nextScheduledAtMs: null, createdAtMs: nowMs,
    updatedAtMs: nowMs,
  };
}

export function timerAt(scheduledAtMs: number): TimerWrite {
  return { fireAtMs: scheduledAtMs, scheduledAtMs };
}

export async function createJob(store: Store, options: {
  spec?: Partial<JobSpec>; team?: string; nowMs?: number; timer?: TimerWrite | null;
} = {}): Promise<JobRecord> {
  const nowMs = options.nowMs ?? t0Ms;
  const job = jobRecord(jobSpec(options.spec), nowMs, options.team);
  const timer = options.timer === undefined ? timerAt(nowMs + minuteMs) : options.timer;
  const [outcome] = await store.createJobs([{ job, timer }], nowMs);
  assert.equal(outcome?.kind, 'created');
  return outcome.job;
}

export async function pendingTimerOf(store: Store, job: JobRecord): Promise<LoadedTimer | undefined> {
  const timers = await store.loadTimers({ shards: [job.shard], untilMs: Number.MAX_SAFE_INTEGER, limit: 10_000 });
  const mine = timers.filter((timer) => timer.jobId === job.jobId);
  assert.ok(mine.length <= 1, 'one pending timer per job');
  return mine[0];
}

export async function ownShard(store: Store, shard: number, nowMs = t0Ms, nodeId = 'node-a'): Promise<ShardLease> {
  const [lease] = await store.acquireShardLeases(nodeId, [shard], leaseTtlMs, nowMs);
  assert.ok(lease !== undefined, `${nodeId} acquires shard ${shard}`);
  return lease;
}

export function dispatchItem(lease: ShardLease, timer: LoadedTimer, options: {
  occurrences?: OccurrenceWrite[]; nextTimer?: TimerWrite | null;
} = {}): DispatchItem {
  return {
    shard: timer.shard,
    shardToken: lease.token,
    timerId: timer.timerId,
    jobId: timer.jobId,
    occurrences: options.occurrences
      ?? [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }],
    nextTimer: options.nextTimer ?? null,
  };
}

/**
 * Fires up to `limit` pending timers of any shard at `fireMs`, 500 per dispatch, as one node
 * owning every shard would: one ready occurrence each, then the next timer one minute later.
 * Answers the timers fired.
 */
export async function fireTimersInBulk(store: Store, limit: number, fireMs: number): Promise<LoadedTimer[]> {
  const leases = await store.acquireShardLeases('node-a', Array.from({ length: 1_024 }, (_, shard) => shard), 3_600_000, t0Ms);
  const leaseOf = new Map(leases.map((lease) => [lease.shard, lease]));
  const timers = await store.loadTimers({ shards: [...leaseOf.keys()], untilMs: Number.MAX_SAFE_INTEGER, limit });
  for (let start = 0; start < timers.length; start += 500) {
    await store.dispatch(timers.slice(start, start + 500).map((timer) =>
      dispatchItem(leaseOf.get(timer.shard)!, timer, { nextTimer: timerAt(timer.scheduledAtMs + minuteMs) })), fireMs);
  }
  return timers;
}

/**
 * Fires the job's pending timer as its shard owner would: one ready occurrence at the
 * timer's scheduled time, then the next timer one minute later (or none).
 */
export async function firePending(store: Store, job: JobRecord, nowMs: number, options: { recurring?: boolean } = {}):
  Promise<{ result: DispatchResult; runId: string; timer: LoadedTimer }> {
  const timer = await pendingTimerOf(store, job);
  assert.ok(timer !== undefined, 'the job has a pending timer');
  const lease = await ownShard(store, job.shard, nowMs);
  const nextTimer = (options.recurring ?? true) ? timerAt(timer.scheduledAtMs + minuteMs) : null;
  const [result] = await store.dispatch([dispatchItem(lease, timer, { nextTimer })], nowMs);
  assert.ok(result !== undefined);
  return { result, runId: runIdOf(job.jobId, timer.scheduledAtMs), timer };
}

/**
 * A `buffer_one` job whose first occurrence (fired at t0 + 1 min) is leased and whose second
 * (t0 + 2 min) is held behind it.
 */
export async function heldBehindRunning(store: Store): Promise<{
  job: JobRecord; first: { runId: string }; leased: LeasedRun; held: { result: DispatchResult; runId: string };
}> {
  const job = await createJob(store, { spec: { overlap: 'buffer_one' } });
  const first = await firePending(store, job, t0Ms + minuteMs);
  const leased = await leaseOne(store, t0Ms + minuteMs);
  assert.equal(leased?.runId, first.runId);
  const held = await firePending(store, job, t0Ms + 2 * minuteMs);
  assert.ok(held.result.kind === 'dispatched' && held.result.runs[0]?.status === 'ready');
  return { job, first, leased, held };
}

export async function leaseOne(store: Store, nowMs: number, options: {
  pool?: string; team?: string | null; leaseMs?: number | null; workerId?: string; aheadMs?: number;
} = {}): Promise<LeasedRun | undefined> {
  const runs = await store.leaseRuns({
    team: options.team === undefined ? defaultTeam : options.team,
    pool: options.pool ?? 'pool-a', max: 1, leaseMs: options.leaseMs ?? null,
    workerId: options.workerId ?? 'worker-1', nowMs, ...(options.aheadMs === undefined ? {} : { aheadMs: options.aheadMs }),
  });
  assert.ok(runs.length <= 1);
  return runs[0];
}

/** Runs `body` against a fresh store and always cleans up. */
export async function withStore(open: OpenStore, body: (store: Store, handle: StoreHandle) => Promise<void>):
  Promise<void> {
  const handle = await open();
  try {
    await body(handle.store, handle);
  } finally {
    await handle.cleanup();
  }
}

/**
 * Opens an upgraded store and checks that exactly `watchedJobId` is silent a minute after t0
 * (the schema upgrade that adds the dead man's switch's column fills it), then closes it.
 */
export async function assertOnlyWatchedAfterUpgrade(open: () => Promise<Store>, watchedJobId: string): Promise<void> {
  const upgraded = await open();
  try {
    const silent = await upgraded.findSilentJobs(null, t0Ms + minuteMs, 10);
    assert.deepEqual(silent.map((entry) => entry.job.jobId), [watchedJobId]);
  } finally {
    await upgraded.close();
  }
}
