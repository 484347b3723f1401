/**
 * Many teams on one pool (DESIGN.md "Many teams"), in process against the embedded store on a
 * temp file and the real clock: the store, the lease planner and workers leasing for every team
 * (an admin key), with no HTTP between them, so the figures are the lease policy's and the store's.
 *
 * 1. Team A floods the pool (`ready` runs ready, `pending` one-shot timers a day out) while team
 *    B creates `trickle` jobs a second due now for `seconds`; B's pickup lag (ready → leased),
 *    with fair leasing and, on a copy of the same file, without (lane by lane, oldest first).
 * 2. P2's share of the leases while P0 has a backlog (target 20 % ± 2 points).
 * 3. A resource capped at 5 under `capped` tagged runs that each run 20 ms: the most running at
 *    once, found over the run ledger (each run's leased → ended events).
 *
 * Sizes: `--size ready=N --size pending=N --size seconds=N --size trickle=N --size workers=N
 * --size batch=N --size capacity=N --size capped=N --size shareLeases=N`; `--quick` makes them
 * small. The fleet gets through `capacity` runs a second, so team A's backlog outlasts the trickle.
 */
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { SystemClock } from '../src/clock.js';
import type { JobSpec, Lane } from '../src/domain/types.js';
import { newJobId, sha256Hex, shardOf } from '../src/domain/identity.js';
import type { JobRecord } from '../src/domain/types.js';
import { Metrics } from '../src/obs/metrics.js';
import { LeasePlanner } from '../src/service/lease-planner.js';
import { openSqliteStore } from '../src/store/sqlite/index.js';
import type { CreateJobInput, LeasedRun, Store } from '../src/store/store.js';
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import type { BenchResult, Figure } from './report.js';

interface FairnessSizes {
  ready: number;
  pending: number;
  seconds: number;
  trickle: number;
  workers: number;
  batch: number;
  capped: number;
  shareLeases: number;
  /** Runs a second the worker fleet gets through: below it, team A's backlog outlasts the trickle. */
  capacity: number;
}

const fullSizes: FairnessSizes = {
  ready: 200_000, pending: 1_000_000, seconds: 30, trickle: 10, workers: 4, batch: 100, capped: 300, shareLeases: 400, capacity: 5_000,
};
const quickSizes: FairnessSizes = { ready: 2_000, pending: 2_000, seconds: 2, trickle: 10, workers: 2, batch: 50, capped: 30, shareLeases: 60, capacity: 1_000 };
const createBatch = 5_000;
const drainWaitMs = 5_000;
const pool = 'shared';
const clock = new SystemClock();

export const fairnessBenchmark: Benchmark = {
  name: 'fairness',
  title: 'many teams on one pool: a trickle behind a flood (fair leasing on and off), P2\'s share, a resource cap',
  run: runFairness,
};

async function runFairness(context: BenchContext): Promise<BenchResult> {
  const sizes = { ...(context.quick ? quickSizes : fullSizes) } as FairnessSizes;
  for (const [name, value] of Object.entries(context.sizes ?? {})) {
    if (!(name in sizes)) throw new Error(`fairness knows the sizes ${Object.keys(sizes).join(', ')}, not ${name}`);
    (sizes as unknown as Record<string, number>)[name] = value;
  }
  const notes: string[] = [];
  const dir = context.tempDir('tickler-bench-fairness-');
  const seeded = join(dir, 'seeded.db');
  context.log(`fairness: seeding ${sizes.ready} ready runs and ${sizes.pending} pending timers of team A`);
  await seed(seeded, sizes);
  const figures: Figure[] = [];
  for (const fair of [true, false]) {
    const path = join(dir, fair ? 'fair.db' : 'unfair.db');
    copyFileSync(seeded, path);
    context.log(`fairness: team B's trickle, fair leasing ${fair ? 'on' : 'off'}`);
    const outcome = await trickle(path, sizes, fair);
    const label = `B pickup lag, fair leasing ${fair ? 'on' : 'off'}`;
    figures.push(...latencyFigures(label, summarise(outcome.lagsMs), fair ? { p99Ms: 1_000 } : {}));
    figures.push({ label: `A runs leased meanwhile, fair leasing ${fair ? 'on' : 'off'}`, value: outcome.aLeased, unit: 'runs' });
    if (outcome.unleased > 0) {
      notes.push(`fair leasing ${fair ? 'on' : 'off'}: ${outcome.unleased} of team B's runs were not leased ${drainWaitMs} ms after the ` +
        'trickle stopped; their lag is counted up to then (a lower bound)');
    }
  }
  context.log('fairness: P2 share under a P0 backlog');
  const share = await p2Share(join(dir, 'share.db'), sizes);
  figures.push({ label: 'P2 share of leases under P0 backlog', value: Math.round(share * 1_000) / 10, unit: '%',
    target: { comparison: '<=', value: 22 } });
  figures.push({ label: 'P2 share of leases under P0 backlog (floor)', value: Math.round(share * 1_000) / 10, unit: '%',
    target: { comparison: '>=', value: 18 } });
  context.log('fairness: a resource capped at 5');
  const most = await resourceCap(join(dir, 'cap.db'), sizes);
  figures.push({ label: 'most runs of a resource capped at 5 running at once (run ledger)', value: most, unit: 'runs',
    target: { comparison: '<=', value: 5 } });
  notes.push('in process: the embedded store on a temp file, the lease planner and admin-key workers; no HTTP');
  return { name: fairnessBenchmark.name, title: fairnessBenchmark.title, parameters: { ...sizes }, figures, notes };
}

/** A one-shot job of `team` in the shared pool, as the API would store it. */
function jobRecord(spec: Partial<JobSpec>, nowMs: number, team: string): JobRecord {
  const full: JobSpec = {
    key: null, schedule: { at: new Date(nowMs).toISOString() }, pool, payload: { n: 1 }, lane: 'P1', tolerance_s: 0,
    retry: { max_attempts: 3, base_s: 30, max_s: 300 }, overlap: 'allow', catch_up: 'latest', catch_up_window_s: 86_400,
    dst: { gap: 'shift', repeat: 'first' }, idempotency: 'keyed', lease_s: 60, max_silence_s: null, resources: [], labels: {},
    ...spec,
  };
  const jobId = newJobId(nowMs);
  return {
    jobId, team, state: 'active', spec: full, requestHash: sha256Hex(JSON.stringify(full)), shard: shardOf(jobId), version: 1,
    nextFireAtMs: null, nextScheduledAtMs: null, createdAtMs: nowMs, updatedAtMs: nowMs,
  };
}

function oneShot(team: string, lane: Lane, readyMs: number, spec: Partial<JobSpec> = {}): CreateJobInput {
  const job = jobRecord({ lane, schedule: { at: new Date(readyMs).toISOString() }, ...spec }, readyMs, team);
  return { job, timer: null, dueNow: [{ scheduledAtMs: readyMs, fireAtMs: readyMs, status: 'ready' }] };
}

async function createAll(store: Store, count: number, make: (index: number) => CreateJobInput, nowMs: number): Promise<void> {
  for (let start = 0; start < count; start += createBatch) {
    const items = Array.from({ length: Math.min(createBatch, count - start) }, (_, offset) => make(start + offset));
    await store.createJobs(items, nowMs);
  }
}

async function seed(path: string, sizes: FairnessSizes): Promise<void> {
  const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
  const nowMs = clock.nowMs();
  await createAll(store, sizes.ready, (index) => oneShot('team-a', 'P1', nowMs - sizes.ready + index), nowMs);
  const dayMs = 86_400_000;
  await createAll(store, sizes.pending, (index) => {
    const fireMs = nowMs + dayMs + index;
    const job = jobRecord({ schedule: { at: new Date(fireMs).toISOString() } }, nowMs, 'team-a');
    return { job, timer: { fireAtMs: fireMs, scheduledAtMs: fireMs } };
  }, nowMs);
  await store.close();
}

function planned(store: Store, fair: boolean): Store {
  return new LeasePlanner({ store, clock, metrics: new Metrics(), logger: { warn: () => undefined }, fairTeams: fair }).store;
}

/**
 * Workers leasing for every team until `stop` says so, each lease's runs taking `runMs` (or,
 * when 0, the fleet's share of `capacity`) and then completed together.
 */
function startWorkers(store: Store, sizes: FairnessSizes, onLeased: (runs: LeasedRun[], atMs: number) => void,
  runMs = 0): { stop(): Promise<void> } {
  let stopping = false;
  const loops = Array.from({ length: sizes.workers }, async (_, worker) => {
    while (!stopping) {
      const runs = await store.leaseRuns({ team: null, pool, max: sizes.batch, leaseMs: 60_000, workerId: `w${worker}`, nowMs: clock.nowMs() });
      onLeased(runs, clock.nowMs());
      if (runs.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        continue;
      }
      const busyMs = runMs > 0 ? runMs : (runs.length * sizes.workers * 1_000) / sizes.capacity;
      await new Promise((resolve) => setTimeout(resolve, busyMs));
      await Promise.all(runs.map((run) => store.completeRun({ team: null, runId: run.runId, fencingToken: run.fencingToken,
        status: 'succeeded', error: null, result: null, nowMs: clock.nowMs(), wantRun: false })));
    }
  });
  return {
    async stop() {
      stopping = true;
      await Promise.all(loops);
    },
  };
}

async function trickle(path: string, sizes: FairnessSizes, fair: boolean):
  Promise<{ lagsMs: number[]; aLeased: number; unleased: number }> {
  const raw = await openSqliteStore({ path, synchronous: 'NORMAL' });
  const store = planned(raw, fair);
  const lagsMs: number[] = [];
  let aLeased = 0;
  let bCreated = 0;
  const workers = startWorkers(store, sizes, (runs, atMs) => {
    for (const run of runs) {
      if (run.team === 'team-b') lagsMs.push(Math.max(0, atMs - run.readyAtMs));
      else aLeased++;
    }
  });
  const spacingMs = 1_000 / sizes.trickle;
  const endMs = clock.nowMs() + sizes.seconds * 1_000;
  for (let nextMs = clock.nowMs(); nextMs < endMs; nextMs += spacingMs) {
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, nextMs - clock.nowMs())));
    const nowMs = clock.nowMs();
    await raw.createJobs([oneShot('team-b', 'P1', nowMs)], nowMs);
    bCreated++;
  }
  const drainUntilMs = clock.nowMs() + drainWaitMs;
  while (lagsMs.length < bCreated && clock.nowMs() < drainUntilMs) await new Promise((resolve) => setTimeout(resolve, 20));
  await workers.stop();
  const unleased = bCreated - lagsMs.length;
  if (unleased > 0) {
    const waiting = await raw.listRuns({ team: 'team-b', status: 'ready', limit: 1_000 });
    const nowMs = clock.nowMs();
    for (const run of waiting.items) lagsMs.push(nowMs - (run.readyAtMs ?? nowMs));
  }
  await raw.close();
  return { lagsMs, aLeased, unleased };
}

async function p2Share(path: string, sizes: FairnessSizes): Promise<number> {
  const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
  const nowMs = clock.nowMs();
  const backlog = sizes.shareLeases * sizes.batch;
  await createAll(store, backlog, (index) => oneShot('team-a', 'P0', nowMs - backlog + index), nowMs);
  await createAll(store, backlog, (index) => oneShot('team-a', 'P2', nowMs - 2 * backlog + index), nowMs);
  const planner = planned(store, true);
  let leased = 0;
  let toP2 = 0;
  for (let lease = 0; lease < sizes.shareLeases; lease++) {
    // Lease sizes vary as a busy fleet's do: 1 to `batch`.
    const runs = await planner.leaseRuns({ team: null, pool, max: 1 + (lease * 37) % sizes.batch, leaseMs: 60_000, workerId: 'w', nowMs });
    leased += runs.length;
    toP2 += runs.filter((run) => run.lane === 'P2').length;
  }
  await store.close();
  return leased === 0 ? 0 : toP2 / leased;
}

async function resourceCap(path: string, sizes: FairnessSizes): Promise<number> {
  const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
  const nowMs = clock.nowMs();
  await store.putResourceCap('db', 5, nowMs);
  await createAll(store, sizes.capped, (index) => oneShot(index % 2 === 0 ? 'team-a' : 'team-b', 'P1', nowMs - sizes.capped + index,
    index % 3 === 2 ? {} : { resources: ['db'] }), nowMs);
  let done = 0;
  const workers = startWorkers(planned(store, true), { ...sizes, batch: 10 }, (runs) => {
    done += runs.length;
  }, 20);
  while (done < sizes.capped) await new Promise((resolve) => setTimeout(resolve, 20));
  await workers.stop();
  // Over the ledger: +1 at each tagged run's lease, −1 at its end, in time order.
  const steps: [number, number][] = [];
  const runs = await store.listRuns({ team: null, pool, limit: 1_000 });
  let page = runs;
  for (;;) {
    for (const run of page.items) {
      const job = await store.getJob(null, run.jobId);
      if (job?.spec.resources.includes('db') !== true) continue;
      const events = (await store.getRun(null, run.runId))!.events;
      for (const event of events) {
        if (event.type === 'leased') steps.push([event.atMs, 1]);
        if (event.fromStatus === 'running' && event.toStatus !== 'running') steps.push([event.atMs, -1]);
      }
    }
    if (page.nextCursor === null) break;
    page = await store.listRuns({ team: null, pool, limit: 1_000, cursor: page.nextCursor });
  }
  await store.close();
  steps.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let running = 0;
  let most = 0;
  for (const [, step] of steps) {
    running += step;
    most = Math.max(most, running);
  }
  return most;
}
