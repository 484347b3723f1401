/**
 * Issue 4 speed: a three-node cluster on the local PostgreSQL, as real processes. Each
 * benchmark makes its own database (dropped afterwards) and starts, on it, one API node
 * alone (it migrates the schema), then three `--roles scheduler` nodes and the other API
 * nodes at once, and waits until the schedulers hold fair, disjoint shares of the 1,024
 * shards (their /readyz). Everything is measured from outside: the run ledger read through
 * an API node, the nodes' /metrics and /readyz, /proc for CPU time.
 *
 * Why separate API nodes rather than three `api,scheduler` nodes: that is the documented
 * cluster shape (README "Running a cluster"), the failover kill then hits the scheduler role
 * alone (the workers and the ledger reads keep their API node, so the figure is the shard
 * takeover, not a worker reconnecting), and a scheduler's dispatch loop does not share its
 * event loop with the HTTP work of creates, leases and completions.
 *
 *   - `cluster-throughput`: timers due at an offered rate above the target, SDK workers (one
 *     `createWorker` per API node, in this process) handle them; the figure is runs the ledger
 *     shows succeeded ÷ (last finished_at − first fire_at).
 *   - `cluster-precision`: 2,000 timers due per second with the workers attached; fire lag from
 *     the ledger (dispatched_at − fire_at).
 *   - `cluster-failover`: a steady trickle of timers, no workers; the owner of the busiest shard
 *     is sent SIGKILL, and the ledger says when timers of its shards were dispatched again.
 *
 * Timing is the server's default (shard lease TTL 10 s, renewed every 3 s) unless the run is
 * --quick, which uses the test timing of test/e2e/cluster.test.ts (TTL 2 s) to stay short.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';
import { shardOf } from '../src/domain/identity.js';
import { shardCount, timingDefaults } from '../src/limits.js';
import type { TicklerClient } from '../src/worker/client.js';
import { TicklerApiError } from '../src/worker/errors.js';
import type { Job, JobCreateRequest, Run } from '../src/worker/wire.js';
import type { BenchContext, Benchmark } from './context.js';
import { LatencyRecorder, latencyFigures, summarise, type LatencySummary } from './latency.js';
import {
  createInBatches, isoOf, ledgerLagsMs, maxOf, minOf, oneShotAt, plannedLeadMs, pollUntil, readRuns, sleepUntil, wallClock,
  worstSecondsNote,
  type BatchCreateOutcome,
} from './load.js';
import { createFreshDatabase, type FreshDatabase } from './peers/services.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult, Figure } from './report.js';
import { sumMetric, type BenchServer } from './server-process.js';
import { startWorkerProbe, type WorkerProbe } from './worker-probe.js';

const schedulerCount = 3;
const apiNodeCount = 2;
/** The timing test/e2e/cluster.test.ts uses; --quick only, so the failover smoke run stays short. */
const quickTimingEnv: Record<string, string> = {
  TICKLER_SHARD_LEASE_TTL_MS: '2000',
  TICKLER_SHARD_LEASE_RENEW_INTERVAL_MS: '500',
  TICKLER_SHARD_LEASE_SAFETY_MARGIN_MS: '500',
};
const fairShareTimeoutMs = 120_000;
const readyzPollIntervalMs = 100;
const backendSampleIntervalMs = 100;

// ---------------------------------------------------------------------------------------
// The cluster

interface ClusterNode {
  readonly name: string;
  readonly server: BenchServer;
}

interface Cluster {
  readonly database: FreshDatabase;
  readonly apiNodes: ClusterNode[];
  readonly schedulers: ClusterNode[];
  readonly shardLeaseTtlMs: number;
}

async function startCluster(context: BenchContext, label: string): Promise<Cluster> {
  const database = await createFreshDatabase(`bench_${label}`);
  context.defer(() => database.drop());
  const timingEnv = context.quick ? quickTimingEnv : {};
  const start = async (name: string, roles: string): Promise<ClusterNode> => ({
    name,
    server: await startManagedServer(context, `${label}-${name}`, {
      dataDir: context.tempDir(`tickler-bench-${label}-${name}-`),
      args: ['--store', database.url, '--roles', roles, '--node-id', name],
      env: timingEnv,
    }),
  });
  // The first node migrates alone, so the others race only for shards.
  const firstApi = await start('api-1', 'api');
  const others = await Promise.all([
    ...Array.from({ length: apiNodeCount - 1 }, (_, index) => start(`api-${index + 2}`, 'api')),
    ...Array.from({ length: schedulerCount }, (_, index) => start(`s${index + 1}`, 'scheduler')),
  ]);
  const cluster: Cluster = {
    database,
    apiNodes: [firstApi, ...others.filter((node) => node.name.startsWith('api-'))],
    schedulers: others.filter((node) => node.name.startsWith('s')),
    shardLeaseTtlMs: context.quick ? Number(quickTimingEnv['TICKLER_SHARD_LEASE_TTL_MS']) : timingDefaults.shardLeaseTtlMs,
  };
  const fair = await pollUntil(async () => isFairShare(await shardsByNode(cluster.schedulers)),
    { intervalMs: 250, timeoutMs: fairShareTimeoutMs });
  if (!fair) {
    throw new Error(`the scheduler nodes did not reach fair shares within ${fairShareTimeoutMs} ms: ` +
      JSON.stringify([...(await shardsByNode(cluster.schedulers)).entries()].map(([name, shards]) => [name, shards.length])));
  }
  context.log(`${label}: cluster up on database ${database.name}: ${cluster.apiNodes.length} API nodes, ` +
    `${cluster.schedulers.length} scheduler nodes with fair shard shares`);
  return cluster;
}

/** Each node's owned shards, from its /readyz; a node that does not answer owns none. */
async function shardsByNode(nodes: readonly ClusterNode[]): Promise<Map<string, number[]>> {
  const entries = await Promise.all(nodes.map(async (node): Promise<[string, number[]]> => {
    try {
      const answer = await node.server.client.readyz({ timeoutMs: 2_000 });
      return [node.name, Array.isArray(answer['shards']) ? answer['shards'] as number[] : []];
    } catch {
      return [node.name, []];
    }
  }));
  return new Map(entries);
}

/** Disjoint shares covering every shard, none above ceil(1024 / nodes). */
function isFairShare(shards: Map<string, number[]>): boolean {
  const all = [...shards.values()].flat();
  const fairMax = Math.ceil(shardCount / shards.size);
  return new Set(all).size === shardCount && all.length === shardCount &&
    [...shards.values()].every((owned) => owned.length <= fairMax);
}

function coversEveryShard(shards: Map<string, number[]>): boolean {
  return new Set([...shards.values()].flat()).size === shardCount;
}

/**
 * A node still running this long after SIGTERM is killed (its own shutdown deadline is 10 s):
 * a scheduler whose event loop never yields ignores both, and would hang the benchmark.
 */
const sigtermPatienceMs = 30_000;

/** Stops every node with SIGTERM (profiles are written then) and collects the notes. */
async function stopCluster(context: BenchContext, label: string, nodes: readonly ClusterNode[]): Promise<string[]> {
  const notes = await Promise.all(nodes.map(async (node) => {
    let killed = false;
    const patience = setTimeout(() => {
      killed = true;
      void node.server.kill();
    }, sigtermPatienceMs);
    try {
      const stopped = await stopAndProfile(context, `${label}-${node.name}`, node.server);
      return killed ? [...stopped, `${node.name} was still running ${sigtermPatienceMs / 1_000} s after SIGTERM; killed with SIGKILL`] : stopped;
    } finally {
      clearTimeout(patience);
    }
  }));
  return notes.flat();
}

/** Counters each scheduler node reports, summed over their labels: the work split and any lease trouble. */
const schedulerCounters = [
  'tickler_dispatches_total',
  'tickler_dispatch_skipped_local_lease_expired_total',
  'tickler_dispatch_rejected_stale_token_total',
  'tickler_dispatch_duplicates_total',
  'tickler_shard_ownership_changes_total',
] as const;

async function schedulerCountersNote(nodes: readonly ClusterNode[]): Promise<string> {
  const texts = await Promise.all(nodes.map(async (node) => {
    try {
      return await node.server.client.metrics({ timeoutMs: 5_000 });
    } catch {
      return null;
    }
  }));
  const perCounter = schedulerCounters.map((name) => `${name} ` + nodes.map((node, index) =>
    `${node.name} ${texts[index] === null ? 'unreachable' : sumMetric(texts[index]!, name)}`).join(', '));
  return `scheduler nodes' /metrics at the end: ${perCounter.join('; ')}`;
}

// ---------------------------------------------------------------------------------------
// CPU time from outside: where the two cores went during a measurement window

const clockTicksPerS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process from /proc/<pid>/stat, in seconds; null once it is gone. */
function cpuSecondsOfPid(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clockTicksPerS;
  } catch {
    return null;
  }
}

/** Busy and total jiffies of the whole machine, from the first line of /proc/stat. */
function machineJiffies(): { busy: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((sum, value) => sum + value, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return { busy: total - idle, total };
}

async function postgresBackendPids(database: FreshDatabase): Promise<number[]> {
  const client = new pg.Client({ connectionString: database.url, connectionTimeoutMillis: 2_000 });
  await client.connect();
  try {
    const result = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
    return result.rows.map((row) => row.pid);
  } finally {
    await client.end();
  }
}

/**
 * Samples what this database's backends are doing (pg_stat_activity) every `intervalMs`
 * until stopped: the share of samples per state and wait event, and the statements most
 * often seen active. The outside view of where PostgreSQL's part of the time goes.
 */
function startBackendSampler(database: FreshDatabase, intervalMs: number): { stop(): Promise<string> } {
  const client = new pg.Client({ connectionString: database.url, connectionTimeoutMillis: 2_000 });
  const byState = new Map<string, number>();
  const byActiveQuery = new Map<string, number>();
  let samples = 0;
  let running = true;
  const loop = (async () => {
    await client.connect();
    while (running) {
      const result = await client.query<{ state: string | null; wait: string | null; query: string }>(
        `SELECT state, wait_event_type || ':' || wait_event AS wait, left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS query
           FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`);
      samples += 1;
      for (const row of result.rows) {
        const key = `${row.state ?? 'unknown'}${row.wait === null ? '' : ` (${row.wait})`}`;
        byState.set(key, (byState.get(key) ?? 0) + 1);
        if (row.state === 'active') byActiveQuery.set(row.query, (byActiveQuery.get(row.query) ?? 0) + 1);
      }
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
    await client.end();
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      const top = (map: Map<string, number>, count: number): string => [...map.entries()].sort((a, b) => b[1] - a[1])
        .slice(0, count).map(([key, seen]) => `${key} ${(seen / Math.max(1, samples)).toFixed(2)}`).join('; ');
      return `PostgreSQL backends of this database, sampled every ${intervalMs} ms (${samples} samples; mean backends per ` +
        `sample in each state): ${top(byState, 8)}. Statements most often active: ${top(byActiveQuery, 5)}.`;
    },
  };
}

interface CpuSnapshot {
  atMs: number;
  byNode: Map<string, number>;
  backends: Map<number, number>;
  benchProcessS: number;
  machine: { busy: number; total: number };
}

async function cpuSnapshot(cluster: Cluster): Promise<CpuSnapshot> {
  const byNode = new Map<string, number>();
  for (const node of [...cluster.apiNodes, ...cluster.schedulers]) {
    const seconds = cpuSecondsOfPid(node.server.pid);
    if (seconds !== null) byNode.set(node.name, seconds);
  }
  const backends = new Map<number, number>();
  for (const pid of await postgresBackendPids(cluster.database)) {
    const seconds = cpuSecondsOfPid(pid);
    if (seconds !== null) backends.set(pid, seconds);
  }
  const usage = process.cpuUsage();
  return { atMs: wallClock.nowMs(), byNode, backends, benchProcessS: (usage.user + usage.system) / 1e6, machine: machineJiffies() };
}

/**
 * One note: CPU seconds each process spent between two snapshots, as a share of one core,
 * and how busy the whole machine was. PostgreSQL is counted as the backends connected to this
 * benchmark's database (a backend that connected during the window counts from its start);
 * its shared background processes (WAL writer, checkpointer) are left out.
 */
function cpuNote(before: CpuSnapshot, after: CpuSnapshot): string {
  const windowS = (after.atMs - before.atMs) / 1_000;
  const parts: string[] = [];
  let accounted = 0;
  const add = (name: string, seconds: number): void => {
    accounted += seconds;
    parts.push(`${name} ${seconds.toFixed(1)} s (${Math.round((seconds / windowS) * 100)} % of a core)`);
  };
  for (const [name, endS] of after.byNode) add(name, endS - (before.byNode.get(name) ?? endS));
  let backendsS = 0;
  for (const [pid, endS] of after.backends) backendsS += endS - (before.backends.get(pid) ?? 0);
  add(`PostgreSQL backends (${after.backends.size})`, backendsS);
  add('bench process (SDK workers, ledger reads)', after.benchProcessS - before.benchProcessS);
  const machineBusy = (after.machine.busy - before.machine.busy) / Math.max(1, after.machine.total - before.machine.total);
  return `CPU over the ${windowS.toFixed(1)} s window: ${parts.join('; ')}. Sum ${accounted.toFixed(1)} s of ` +
    `${(windowS * cpus().length).toFixed(1)} s available on ${cpus().length} cores; the machine as a whole was ` +
    `${Math.round(machineBusy * 100)} % busy (other work on the shared machine included).`;
}

// ---------------------------------------------------------------------------------------
// Creating load through every API node

const batchCreateRetriesMax = 3;

/**
 * A client whose batch creates are retried when the server answers 5xx. On this loaded machine
 * a batch's transaction is sometimes cut by PostgreSQL's idle-in-transaction timeout (the node
 * was starved of CPU between two statements) and answered 500; the jobs carry keys, so a retry
 * is an idempotent create either way. Retries are counted and sampled for the notes.
 */
function retryingBatchCreates(client: TicklerClient, retries: { count: number; samples: string[] }): TicklerClient {
  const retrying = Object.create(client) as TicklerClient;
  retrying.batchCreateJobs = async (jobs, options) => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await client.batchCreateJobs(jobs, options);
      } catch (error) {
        if (!(error instanceof TicklerApiError) || error.status < 500 || attempt > batchCreateRetriesMax) throw error;
        retries.count += 1;
        if (retries.samples.length < 2) retries.samples.push(`${error.status} ${error.message}`);
        await delay(500 * attempt);
      }
    }
  };
  return retrying;
}

interface ClusterCreateOutcome extends BatchCreateOutcome {
  retries: { count: number; samples: string[] };
}

/**
 * Creates `count` timers with index i due at `fireAtOf(i)` and key `t-<i>`, the indices dealt
 * round-robin over the API nodes.
 */
async function createThroughApiNodes(cluster: Cluster, count: number, fireAtOf: (index: number) => number,
  onCreated?: (job: Job) => void): Promise<ClusterCreateOutcome> {
  const lanes = cluster.apiNodes.length;
  const retries = { count: 0, samples: [] as string[] };
  const startedMs = performance.now();
  const outcomes = await Promise.all(cluster.apiNodes.map((node, lane) => {
    const laneCount = Math.floor(count / lanes) + (lane < count % lanes ? 1 : 0);
    const specOf = (laneIndex: number): JobCreateRequest => {
      const index = laneIndex * lanes + lane;
      return { ...oneShotAt(fireAtOf(index), index), key: `t-${index}` };
    };
    return createInBatches(retryingBatchCreates(node.server.client, retries), laneCount, specOf,
      onCreated === undefined ? {} : { onCreated });
  }));
  return {
    created: outcomes.reduce((sum, outcome) => sum + outcome.created, 0),
    failed: outcomes.reduce((sum, outcome) => sum + outcome.failed, 0),
    elapsedMs: performance.now() - startedMs,
    errorSamples: outcomes.flatMap((outcome) => outcome.errorSamples).slice(0, 3),
    retries,
  };
}

/**
 * Timers due inside the scheduler's load horizon (5 minutes) are announced to their shard's
 * owner as they are created (the near-timer path), which the calibration on timers due next
 * week does not pay: measured on this cluster, such creates ran about 2× slower.
 */
const nearTimerCreateSlowdown = 2.5;

/** Plans the first due time so the creates end first (measured on this cluster), and notes if they did not. */
async function firstDueAfterCreates(cluster: Cluster, count: number, quick: boolean): Promise<number> {
  return wallClock.nowMs() + nearTimerCreateSlowdown * await plannedLeadMs(cluster.apiNodes[0]!.server.client, count, quick);
}

function createNotes(created: ClusterCreateOutcome, firstDueMs: number): string[] {
  const notes: string[] = [];
  if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
  if (created.retries.count > 0) {
    notes.push(`${created.retries.count} batch creates answered 5xx and were retried (same keys), e.g. ${created.retries.samples.join(' | ')}`);
  }
  const overMs = wallClock.nowMs() - firstDueMs;
  if (overMs > 0) notes.push(`the creates ended ${Math.round(overMs)} ms after the first timer was due: the first seconds overlapped create load`);
  return notes;
}

// ---------------------------------------------------------------------------------------
// Steady load with workers: cluster-throughput and cluster-precision

interface SteadySizes {
  ratePerS: number;
  durationS: number;
  /** Per SDK worker; there is one worker per API node. */
  workerConcurrency: number;
  drainTimeoutMs: number;
  /** Long-poll wait of the workers: the SDK default (20 s), or short in --quick runs to keep them short. */
  waitS: number;
}

interface SteadyOutcome {
  count: number;
  created: ClusterCreateOutcome;
  runs: Run[];
  /** dispatched_at − fire_at from the ledger, and its summary. */
  ledger: { lagsMs: number[]; undispatched: number };
  lag: LatencySummary;
  firstDueMs: number;
  workerLag: LatencyRecorder;
  handled: number;
  notes: string[];
}

async function runSteadyLoad(context: BenchContext, label: string, sizes: SteadySizes): Promise<SteadyOutcome> {
  const count = sizes.ratePerS * sizes.durationS;
  const cluster = await startCluster(context, label);
  const workerLag = new LatencyRecorder();
  const workers: WorkerProbe[] = cluster.apiNodes.map((node) =>
    startWorkerProbe({ baseUrl: node.server.url, concurrency: sizes.workerConcurrency, recorder: workerLag, waitS: sizes.waitS }));
  context.defer(() => Promise.all(workers.map((worker) => worker.stop())).then(() => undefined));

  const firstDueMs = await firstDueAfterCreates(cluster, count, context.quick);
  const spacingMs = 1_000 / sizes.ratePerS;
  const fireAtOf = (index: number): number => firstDueMs + Math.floor(index * spacingMs);
  context.log(`${label}: creating ${count} timers due from ${isoOf(firstDueMs)} at ${sizes.ratePerS}/s`);
  const created = await createThroughApiNodes(cluster, count, fireAtOf);
  const notes = createNotes(created, firstDueMs);

  await sleepUntil(firstDueMs);
  const cpuBefore = await cpuSnapshot(cluster);
  const backendSampler = startBackendSampler(cluster.database, backendSampleIntervalMs);
  const lastDueMs = fireAtOf(count - 1);
  await sleepUntil(lastDueMs);
  context.log(`${label}: last timer due; draining`);
  const handledCount = (): number => workers.reduce((sum, worker) => sum + worker.handledCount, 0);
  const drained = await pollUntil(async () => handledCount() >= created.created, { intervalMs: 100, timeoutMs: sizes.drainTimeoutMs });
  if (!drained) notes.push(`the workers handled ${handledCount()} of ${created.created} runs within ${sizes.drainTimeoutMs} ms of the last due time`);
  // Stopping a worker waits for its completions to be acknowledged, so the ledger is final.
  await Promise.all(workers.map((worker) => worker.stop()));
  const cpuAfter = await cpuSnapshot(cluster);
  notes.push(cpuNote(cpuBefore, cpuAfter), await backendSampler.stop());
  notes.push(await schedulerCountersNote(cluster.schedulers));

  const runs = await readRuns(cluster.apiNodes[0]!.server.client, firstDueMs, lastDueMs + 1);
  const problems = workers.reduce((sum, worker) => sum + worker.problems.count, 0);
  if (problems > 0) notes.push(`worker problems: ${problems}, e.g. ${workers.flatMap((worker) => worker.problems.samples).slice(0, 2).join(' | ')}`);
  notes.push(...await stopCluster(context, label, [...cluster.schedulers, ...cluster.apiNodes]));
  const ledger = ledgerLagsMs(runs);
  return { count, created, runs, ledger, lag: summarise(ledger.lagsMs), firstDueMs, workerLag, handled: handledCount(), notes };
}

function ledgerCountFigures(outcome: SteadyOutcome): Figure[] {
  return [
    { label: 'timers created', value: outcome.created.created, unit: 'timers' },
    { label: 'runs in the ledger', value: outcome.runs.length, unit: 'runs', target: { comparison: '>=', value: outcome.count } },
    { label: 'runs not dispatched', value: outcome.ledger.undispatched, unit: 'runs', target: { comparison: '<=', value: 0 } },
  ];
}

function earlyNote(ledgerEarly: number, workerEarly: number): string[] {
  return ledgerEarly > 0 || workerEarly > 0
    ? [`EARLY: ${ledgerEarly} runs dispatched and ${workerEarly} handled before fire_at`]
    : [];
}

const throughputFull: SteadySizes = { ratePerS: 6_000, durationS: 30, workerConcurrency: 1_000, drainTimeoutMs: 120_000, waitS: 20 };
const throughputQuick: SteadySizes = { ratePerS: 100, durationS: 2, workerConcurrency: 50, drainTimeoutMs: 20_000, waitS: 1 };
const throughputTargetPerS = 5_000;

export const clusterThroughputBenchmark: Benchmark = {
  name: 'cluster-throughput',
  title: '3 scheduler nodes on PostgreSQL: dispatch plus worker completion, end to end',
  run: async (context) => {
    const sizes = context.quick ? throughputQuick : throughputFull;
    const outcome = await runSteadyLoad(context, 'cluster-throughput', sizes);
    const { ledger, lag } = outcome;
    const succeeded = outcome.runs.filter((run) => run.status === 'succeeded' && run.finished_at !== null);
    const lastFinishedMs = maxOf(succeeded.map((run) => Date.parse(run.finished_at!)));
    const lastDispatchedMs = maxOf(outcome.runs.flatMap((run) => (run.dispatched_at === null ? [] : [Date.parse(run.dispatched_at)])));
    const firstFireMs = minOf(outcome.runs.map((run) => Date.parse(run.fire_at)));
    const rateOver = (items: number, endMs: number | null): number | null =>
      endMs === null || firstFireMs === null || endMs <= firstFireMs ? null : items / ((endMs - firstFireMs) / 1_000);
    const finishLag = summarise(succeeded.map((run) => Date.parse(run.finished_at!) - Date.parse(run.fire_at)));
    const figures: Figure[] = [
      ...ledgerCountFigures(outcome),
      { label: 'runs succeeded (ledger)', value: succeeded.length, unit: 'runs', target: { comparison: '>=', value: outcome.count } },
      { label: 'end to end: succeeded ÷ (last finished_at − first fire_at)', value: rateOver(succeeded.length, lastFinishedMs),
        unit: 'runs/s', target: { comparison: '>=', value: throughputTargetPerS } },
      { label: 'dispatch: dispatched ÷ (last dispatched_at − first fire_at)', value: rateOver(ledger.lagsMs.length, lastDispatchedMs),
        unit: 'runs/s' },
      ...latencyFigures('fire lag (ledger: fire_at → ready)', lag),
      { label: 'due → finished (ledger: finished_at − fire_at) p99', value: finishLag.p99Ms, unit: 'ms' },
    ];
    return {
      name: clusterThroughputBenchmark.name,
      title: clusterThroughputBenchmark.title,
      parameters: clusterParameters(sizes, outcome),
      figures,
      notes: [
        `offered ${sizes.ratePerS} timers/s for ${sizes.durationS} s; a cluster that keeps up shows about the offered rate, ` +
          'one that does not shows its capacity',
        ...earlyNote(lag.earlyCount, outcome.workerLag.summary().earlyCount),
        ...outcome.notes,
      ],
    };
  },
};

const precisionFull: SteadySizes = { ratePerS: 2_000, durationS: 30, workerConcurrency: 500, drainTimeoutMs: 60_000, waitS: 20 };
const precisionQuick: SteadySizes = { ratePerS: 50, durationS: 2, workerConcurrency: 20, drainTimeoutMs: 20_000, waitS: 1 };

export const clusterPrecisionBenchmark: Benchmark = {
  name: 'cluster-precision',
  title: '3 scheduler nodes on PostgreSQL: fire lag at 2,000 timers due per second',
  run: async (context) => {
    const sizes = context.quick ? precisionQuick : precisionFull;
    const outcome = await runSteadyLoad(context, 'cluster-precision', sizes);
    const { lag } = outcome;
    const warmUp = context.quick ? quickWarmUpS : warmUpS;
    const workerLag = outcome.workerLag.summary();
    return {
      name: clusterPrecisionBenchmark.name,
      title: clusterPrecisionBenchmark.title,
      parameters: clusterParameters(sizes, outcome),
      figures: [
        ...ledgerCountFigures(outcome),
        ...latencyFigures('fire lag (ledger: fire_at → ready)', lag, { p99Ms: 250 }),
        ...latencyFigures(`fire lag (ledger) of timers due after the first ${warmUp} s`, lagAfter(outcome, warmUp * 1_000)),
        { label: 'runs handled by the SDK workers', value: workerLag.count, unit: 'runs' },
        ...latencyFigures('due → SDK handler start', workerLag),
      ],
      notes: [...earlyNote(lag.earlyCount, workerLag.earlyCount), worstSecondsNote(outcome.runs, outcome.firstDueMs), ...outcome.notes],
    };
  },
};

/**
 * The first seconds of a load are the latest on a fresh cluster (cold JIT, caches and
 * connections, the workers' first leases): the lag of the rest, apart, tells a start-up
 * transient from a steady shortfall. The target is judged on every timer all the same.
 */
const warmUpS = 5;
/** A --quick load lasts 2 s. */
const quickWarmUpS = 1;

function lagAfter(outcome: SteadyOutcome, afterMs: number): LatencySummary {
  return summarise(outcome.runs.flatMap((run) => (run.dispatched_at === null || Date.parse(run.fire_at) < outcome.firstDueMs + afterMs
    ? [] : [Date.parse(run.dispatched_at) - Date.parse(run.fire_at)])));
}

function clusterParameters(sizes: SteadySizes, outcome: SteadyOutcome): Record<string, string | number> {
  return {
    schedulers: schedulerCount, apiNodes: apiNodeCount, ratePerS: sizes.ratePerS, durationS: sizes.durationS,
    timers: outcome.count, workers: apiNodeCount, workerConcurrency: sizes.workerConcurrency,
    createRatePerS: Math.round(outcome.created.created / (outcome.created.elapsedMs / 1_000)),
  };
}

// ---------------------------------------------------------------------------------------
// cluster-failover

interface FailoverSizes {
  tricklePerS: number;
  /** The kill comes this long after the first timer is due. */
  killAfterS: number;
  /** The trickle goes on this long after the kill. */
  afterKillS: number;
}

const failoverFull: FailoverSizes = { tricklePerS: 1_000, killAfterS: 15, afterKillS: 30 };
const failoverQuick: FailoverSizes = { tricklePerS: 50, killAfterS: 4, afterKillS: 8 };
/** Timers due within this long after the kill show when each of the victim's shards fired again. */
const firstDueWindowMs = 1_000;
/** How long after the last due time the ledger is read. */
const failoverGraceMs = 3_000;
/** How long the ledger is read again while timers are still undispatched. */
const lateLedgerTimeoutMs = 30_000;

export const clusterFailoverBenchmark: Benchmark = {
  name: 'cluster-failover',
  title: '3 scheduler nodes on PostgreSQL: kill -9 of a busy shard\'s owner, until its shards fire again',
  run: runFailover,
};

async function runFailover(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? failoverQuick : failoverFull;
  const label = 'cluster-failover';
  const count = sizes.tricklePerS * (sizes.killAfterS + sizes.afterKillS);
  const cluster = await startCluster(context, label);
  const firstDueMs = await firstDueAfterCreates(cluster, count, context.quick);
  const fireAtOf = (index: number): number => firstDueMs + Math.floor((index * 1_000) / sizes.tricklePerS);
  const killAtMs = firstDueMs + sizes.killAfterS * 1_000;
  // The shard of every timer due just after the planned kill, to find the busiest one.
  const shardsDueAfterKill = new Map<number, number>();
  context.log(`${label}: creating ${count} timers, ${sizes.tricklePerS}/s from ${isoOf(firstDueMs)}; kill planned at ${isoOf(killAtMs)}`);
  const created = await createThroughApiNodes(cluster, count, fireAtOf, (job) => {
    const fireAtMs = job.next_fire_at === null ? NaN : Date.parse(job.next_fire_at);
    if (fireAtMs >= killAtMs && fireAtMs < killAtMs + 2 * firstDueWindowMs) {
      const shard = shardOf(job.job_id);
      shardsDueAfterKill.set(shard, (shardsDueAfterKill.get(shard) ?? 0) + 1);
    }
  });
  const notes = createNotes(created, firstDueMs);

  await sleepUntil(killAtMs - 1_000);
  const owners = await shardsByNode(cluster.schedulers);
  const busiestShard = [...shardsDueAfterKill.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? 0;
  const victim = cluster.schedulers.find((node) => owners.get(node.name)?.includes(busiestShard));
  if (victim === undefined) throw new Error(`no scheduler node owns shard ${busiestShard}: ${JSON.stringify([...owners.entries()])}`);
  const victimShards = new Set(owners.get(victim.name)!);
  const survivors = cluster.schedulers.filter((node) => node !== victim);
  await sleepUntil(killAtMs);
  const killedAtMs = wallClock.nowMs();
  await victim.server.kill();
  context.log(`${label}: killed ${victim.name} (pid ${victim.server.pid}, ${victimShards.size} shards, busiest shard ${busiestShard})`);
  // Outside view of the takeover: the survivors' /readyz covering all 1,024 shards.
  const takeoverLimitMs = cluster.shardLeaseTtlMs + sizes.afterKillS * 1_000;
  const ownedAgain = await pollUntil(async () => coversEveryShard(await shardsByNode(survivors)),
    { intervalMs: readyzPollIntervalMs, timeoutMs: takeoverLimitMs });
  const ownedAgainAtMs = wallClock.nowMs();
  if (!ownedAgain) notes.push(`the survivors did not own every shard within ${takeoverLimitMs} ms of the kill`);

  const lastDueMs = fireAtOf(count - 1);
  await sleepUntil(lastDueMs + failoverGraceMs);
  notes.push(await schedulerCountersNote(survivors));
  // A timer not dispatched yet may be late rather than lost: read again, for a while, before counting it.
  let runs: Run[] = [];
  await pollUntil(async () => {
    runs = await readRuns(cluster.apiNodes[0]!.server.client, firstDueMs, lastDueMs + 1);
    return runs.length >= count && runs.every((run) => run.dispatched_at !== null);
  }, { intervalMs: 2_000, timeoutMs: lateLedgerTimeoutMs });
  notes.push(...await stopCluster(context, label, [...survivors, ...cluster.apiNodes]));

  const ledger = ledgerLagsMs(runs);
  const onVictim = runs.filter((run) => victimShards.has(shardOf(run.job_id)) && Date.parse(run.fire_at) >= killedAtMs);
  const dispatchedMs = (run: Run): number | null => (run.dispatched_at === null ? null : Date.parse(run.dispatched_at));
  const firstAgainMs = minOf(onVictim.flatMap((run) => dispatchedMs(run) ?? []));
  const dueJustAfter = onVictim.filter((run) => Date.parse(run.fire_at) < killedAtMs + firstDueWindowMs);
  const lastOfFirstMs = dueJustAfter.some((run) => run.dispatched_at === null)
    ? null : maxOf(dueJustAfter.flatMap((run) => dispatchedMs(run) ?? []));
  const shardsCovered = new Set(dueJustAfter.map((run) => shardOf(run.job_id))).size;
  const elsewhere = runs.filter((run) => !victimShards.has(shardOf(run.job_id)) &&
    Date.parse(run.fire_at) >= killedAtMs && Date.parse(run.fire_at) < killedAtMs + cluster.shardLeaseTtlMs + 2_000);
  const elsewhereLag = summarise(ledgerLagsMs(elsewhere).lagsMs);
  const victimLag = summarise(ledgerLagsMs(onVictim.filter((run) => Date.parse(run.fire_at) < killedAtMs + cluster.shardLeaseTtlMs)).lagsMs);
  const sinceKillS = (atMs: number | null): number | null => (atMs === null ? null : (atMs - killedAtMs) / 1_000);
  const targetS = cluster.shardLeaseTtlMs / 1_000 + 2;
  const allLag = summarise(ledger.lagsMs);
  if (allLag.earlyCount > 0) notes.push(`EARLY: ${allLag.earlyCount} runs dispatched before fire_at`);
  notes.push(`killed ${victim.name}, owner of ${victimShards.size} shards including the busiest shard ${busiestShard} ` +
    `(${shardsDueAfterKill.get(busiestShard) ?? 0} timers due in the 2 s after the kill); shard lease TTL ` +
    `${cluster.shardLeaseTtlMs} ms (${context.quick ? 'test timing, --quick' : 'server default'}), so the target is ${targetS} s`);
  notes.push(`"its shards fire again": the last dispatch of the ${dueJustAfter.length} timers due on its shards in the ` +
    `${firstDueWindowMs} ms after the kill (they cover ${shardsCovered} of its ${victimShards.size} shards), measured from the kill`);
  return {
    name: clusterFailoverBenchmark.name,
    title: clusterFailoverBenchmark.title,
    parameters: {
      schedulers: schedulerCount, apiNodes: apiNodeCount, ...sizes, timers: count, shardLeaseTtlMs: cluster.shardLeaseTtlMs,
      createRatePerS: Math.round(created.created / (created.elapsedMs / 1_000)),
    },
    figures: [
      { label: 'runs in the ledger', value: runs.length, unit: 'runs', target: { comparison: '>=', value: count } },
      { label: 'runs not dispatched', value: ledger.undispatched, unit: 'runs', target: { comparison: '<=', value: 0 } },
      { label: 'kill -9 → first timer of its shards dispatched', value: sinceKillS(firstAgainMs), unit: 's' },
      { label: 'kill -9 → its shards fire again (last of the timers due on them in the first second)',
        value: sinceKillS(lastOfFirstMs), unit: 's', target: { comparison: '<=', value: targetS } },
      { label: 'kill -9 → the survivors\' /readyz cover all 1,024 shards', value: ownedAgain ? sinceKillS(ownedAgainAtMs) : null, unit: 's' },
      ...latencyFigures('fire lag of its shards\' timers due within one TTL of the kill', victimLag),
      ...latencyFigures('fire lag of the other shards\' timers due meanwhile', elsewhereLag),
    ],
    notes,
  };
}
