/**
 * The phases the store-cost benchmarks time, through the Store API alone: create N one-shot
 * jobs due at t0, dispatch their timers, lease the runs, complete them. Shared by
 * pg-store-cost.ts and sqlite-store-cost.ts, which each wrap a phase in what they measure.
 */
import type { DispatchItem, LeasedRun, Store } from '../../src/store/store.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

export interface StoreCostOptions {
  runs: number;
  createBatch: number;
  createInFlight: number;
  dispatchBatch: number;
  leaseMax: number;
  leasers: number;
  completeBatch: number;
  completeInFlight: number;
  /** Bytes of padding in each job's payload (a string member), beside its index; default 0. */
  payloadPadBytes?: number;
  /** Stops after the create phase (the create path alone, as W1 drives it). */
  onlyCreate?: boolean;
}

/** Times `body` as the phase `name`; the caller prints what it measured. */
export type Phase = (name: string, body: () => Promise<void>) => Promise<void>;

/** Runs `call` over `items` in slices of `size`, `inFlight` slices at a time. */
async function inSlices<T>(items: readonly T[], size: number, inFlight: number, call: (slice: T[]) => Promise<unknown>):
  Promise<void> {
  const pending: Promise<unknown>[] = [];
  for (let index = 0; index < items.length; index += size) {
    pending.push(call(items.slice(index, index + size)));
    if (pending.length >= inFlight) await pending.shift();
  }
  await Promise.all(pending);
}

export async function runStoreCostPhases(store: Store, options: StoreCostOptions, phase: Phase): Promise<void> {
  const createdAtMs = t0Ms - 60_000;
  // overlap forbid is the API's default; it makes dispatch read each job's active runs.
  const pad = 'x'.repeat(options.payloadPadBytes ?? 0);
  // Each job made a millisecond after the one before, so job ids (time first) grow in creation
  // order as a server's do: with one creation time for all, their random tails put every
  // insert into the job-id index on a page of its own (~8 KiB of WAL a create).
  const jobs = Array.from({ length: options.runs }, (_, index) =>
    jobRecord(jobSpec({ schedule: { at: new Date(t0Ms).toISOString() }, overlap: 'forbid',
      payload: pad === '' ? { index } : { index, pad } }), createdAtMs - options.runs + index));
  await phase('create', () => inSlices(jobs, options.createBatch, options.createInFlight,
    (slice) => store.createJobs(slice.map((job) => ({ job, timer: timerAt(t0Ms) })), createdAtMs)));
  if (options.onlyCreate === true) return;
  const shards = [...new Set(jobs.map((job) => job.shard))];
  const tokens = new Map((await store.acquireShardLeases('cost-node', shards, 3_600_000, t0Ms))
    .map((lease) => [lease.shard, lease.token]));
  const timers = await store.loadTimers({ shards, untilMs: t0Ms + 1, limit: options.runs + 1 });
  const items: DispatchItem[] = timers.map((timer) => ({
    shard: timer.shard, shardToken: tokens.get(timer.shard)!, timerId: timer.timerId, jobId: timer.jobId,
    occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }], nextTimer: null,
  }));
  await phase('dispatch', () => inSlices(items, options.dispatchBatch, 3, (slice) => store.dispatch(slice, t0Ms + 10)));
  const leased: LeasedRun[] = [];
  await phase('lease', async () => {
    const leaseUntilEmpty = async (worker: number): Promise<void> => {
      for (;;) {
        const runs = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: options.leaseMax, leaseMs: null,
          workerId: `worker-${worker}`, nowMs: t0Ms + 20 });
        if (runs.length === 0) return;
        leased.push(...runs);
      }
    };
    await Promise.all(Array.from({ length: options.leasers }, (_, worker) => leaseUntilEmpty(worker)));
  });
  await phase('complete', () => inSlices(leased, options.completeBatch, options.completeInFlight, async (slice) => {
    // wantRun false, as the server asks for the SDK's completions (`answer: "status"`).
    const outcomes = await Promise.all(slice.map((run) => store.completeRun({ team: 'team-a', runId: run.runId,
      fencingToken: run.fencingToken, status: 'succeeded', error: null, result: null, nowMs: t0Ms + 30, wantRun: false })));
    if (outcomes.some((outcome) => outcome.kind !== 'completed' && outcome.kind !== 'accepted')) {
      throw new Error('a completion was not accepted');
    }
  }));
  if (leased.length !== options.runs) throw new Error(`leased ${leased.length} of ${options.runs} runs`);
}
