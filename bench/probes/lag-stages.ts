/**
 * Where a timer's fire lag goes, stage by stage, on bench:peers W2's shape: N one-shot timers
 * due evenly over S seconds, starting A seconds ahead, against a real `tickler serve` on its
 * embedded SQLite store, with one SDK worker (concurrency 50, prefetch 50, as bench:peers
 * runs it) in this process. After the run it reads each run's `fire_at`, `dispatched_at`
 * and `started_at` (lease) from the data directory's database, and the handler's start from
 * the worker, and prints the percentiles of each stage:
 *
 *   fire → dispatch     the scheduler's wheel and the dispatch transaction
 *   dispatch → lease    waiting for a lease request (0 when a parked worker is served inside
 *                       the dispatch's transaction)
 *   lease → handler     the lease's answer over HTTP and the SDK starting the handler,
 *                       split at the answer's arrival in this process (lease → answer,
 *                       answer → handler: held for the ready time, or waiting for a slot)
 *
 * with the server's CPU per run (from /proc, all its threads) and this process's, the lease
 * and completion requests and the runs each carried, this process's event-loop delay, and
 * the time each process's main thread waited for a CPU (a tail on two cores is mostly that). The
 * database's times are whole milliseconds; the handler's start is Date.now() on the same
 * clock.
 *
 *   node --import tsx bench/probes/lag-stages.ts [--timers 20000] [--span-s 10] [--ahead-s 5]
 *     [--rounds 1] [--cpu-prof DIR] [--lease-ahead-ms 0] [--hold-ahead-max 0] [--store postgres]
 *
 * `--store postgres` runs the server on a fresh database of the local PostgreSQL (as bench:peers
 * runs tickler-postgres, `--node-id` included) and reads the runs' times from it.
 *
 * `--rounds N` runs the shape N times against the same server and prints each round: the
 * first meets a fresh process (cold JIT, a WAL file still growing), later ones a warm one.
 * `--windows` also prints, per 250 ms of due times, how many runs started 5 ms or more late,
 * beside the machine's CPU and I/O pressure in that window (Linux PSI, /proc/pressure: ms
 * during which some task waited for a CPU, or for I/O), and the correlation of each with the
 * late count: where a tail comes from.
 * `--cpu-prof DIR` profiles the server; the profile is written when it exits.
 * `--lease-ahead-ms N` has the worker lease runs N ms before they are ready (`leaseAheadMs`);
 * its lease then comes before the fire time, so "dispatch -> lease" turns negative.
 * `--prefetch N` (default 50, as bench:peers; 0 is the SDK's default) sets the worker's prefetch.
 * `--hold-ahead-max N` gives it N places for runs held for their time (`holdAheadMax`, as
 * bench:peers runs it: `--lease-ahead-ms 3000 --hold-ahead-max 50000`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants as perfConstants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import pg from 'pg';
import { batchJobsMax } from '../../src/limits.js';
import { createWorker } from '../../src/worker/worker.js';
import type { BenchServer } from '../server-process.js';
import { startStoreServer } from './store-server.js';
import { postgresCpuMs, processCpuMs } from '../proc-cpu.js';

const { values: options } = parseArgs({
  options: {
    timers: { type: 'string', default: '20000' },
    'span-s': { type: 'string', default: '10' },
    'ahead-s': { type: 'string', default: '5' },
    'cpu-prof': { type: 'string' },
    rounds: { type: 'string', default: '1' },
    windows: { type: 'boolean', default: false },
    'lease-ahead-ms': { type: 'string', default: '0' },
    prefetch: { type: 'string', default: '50' },
    'hold-ahead-max': { type: 'string', default: '0' },
    store: { type: 'string', default: 'sqlite' },
  },
});
const count = Number(options.timers);
const spanMs = Number(options['span-s']) * 1_000;
const aheadMs = Number(options['ahead-s']) * 1_000;
const pool = 'stages';
/** `--windows`: the width of a window of due times, and what counts as late. */
const windowMs = 250;
const lateMs = 5;

/** Time a process's main thread spent runnable but waiting for a CPU, and its slices (Linux /proc schedstat). */
function runQueueWait(pid: number | 'self'): { waitNs: number; slices: number } {
  const [, waitNs, slices] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(' ').map(Number);
  return { waitNs: waitNs!, slices: slices! };
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

const opened = await startStoreServer(options.store, 'lag-stages',
  { cpuProfileDir: options['cpu-prof'] });
const { server, database, dataDir } = opened;
try {
  const client = server.client;
  for (let round = 1; round <= Number(options.rounds); round++) {
    console.log(`round ${round}`);
    await measureRound(client, round);
  }
} finally {
  await opened.close();
}

async function measureRound(client: BenchServer['client'], round: number): Promise<void> {
  const firstDueMs = Date.now() + aheadMs;
  const dueOf = (index: number): number => firstDueMs + Math.floor((index * spanMs) / count);
  for (let first = 0; first < count; first += batchJobsMax) {
    const jobs = Array.from({ length: Math.min(batchJobsMax, count - first) }, (_, offset) => first + offset)
      .map((index) => ({ schedule: { at: new Date(dueOf(index)).toISOString() }, pool, payload: { i: index, round } }));
    const { results } = await client.batchCreateJobIds(jobs);
    if (results.some((result) => !('job_id' in result))) throw new Error('a create failed');
  }
  if (Date.now() > firstDueMs - 500) throw new Error('creating took longer than --ahead-s allows; raise it');

  const handledAtMs = new Float64Array(count).fill(Number.NaN);
  /** When the lease answer carrying each run reached this process. */
  const receivedAtMs = new Float64Array(count).fill(Number.NaN);
  let handledCount = 0;
  let allHandled!: () => void;
  const done = new Promise<void>((resolve) => {
    allHandled = resolve;
  });
  const quiet = (): void => undefined;
  // Lease and completion requests this round, and the runs each carried.
  const leaseRuns = client.leaseRuns.bind(client);
  const completeRunsBriefly = client.completeRunsBriefly.bind(client);
  const leases = { requests: 0, runs: 0 };
  const completions = { requests: 0, runs: 0 };
  client.leaseRuns = async (...args) => {
    const answer = await leaseRuns(...args);
    const nowMs = Date.now();
    for (const run of answer.runs) {
      const index = (run.payload as { i?: number } | null)?.i;
      if (index !== undefined && Number.isNaN(receivedAtMs[index]!)) receivedAtMs[index] = nowMs;
    }
    leases.requests++;
    leases.runs += answer.runs.length;
    return answer;
  };
  client.completeRunsBriefly = (items, ...rest) => {
    completions.requests++;
    completions.runs += items.length;
    return completeRunsBriefly(items, ...rest);
  };
  const worker = createWorker({
    client, pool, concurrency: 50, prefetch: Number(options.prefetch), leaseAheadMs: Number(options['lease-ahead-ms']),
    holdAheadMax: Number(options['hold-ahead-max']),
    logger: { debug: quiet, info: quiet, warn: quiet, error: quiet },
    handler: (run) => {
      const index = (run.payload as { i: number }).i;
      if (!Number.isNaN(handledAtMs[index]!)) return;
      handledAtMs[index] = Date.now();
      if (++handledCount === count) allHandled();
    },
  });
  worker.start();
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, firstDueMs - Date.now())));
  const pressure = options.windows ? samplePressure() : null;
  const loopDelay = monitorEventLoopDelay({ resolution: 1 });
  loopDelay.enable();
  const gcPauses: GcPause[] = [];
  const gcObserver = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const startMs = performance.timeOrigin + entry.startTime;
      const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
      gcPauses.push({ startMs, endMs: startMs + entry.duration, minor: kind === perfConstants.NODE_PERFORMANCE_GC_MINOR });
    }
  });
  gcObserver.observe({ entryTypes: ['gc'] });
  const runQueueBefore = { self: runQueueWait('self'), server: runQueueWait(server.pid) };
  const serverCpuBeforeMs = processCpuMs(server.pid);
  const postgresCpuBeforeMs = database === undefined ? 0 : postgresCpuMs();
  const harnessCpuBefore = process.cpuUsage();
  await done;
  pressure?.stop();
  loopDelay.disable();
  gcObserver.disconnect();
  const runQueue = { self: runQueueWait('self'), server: runQueueWait(server.pid) };
  const serverCpuMs = processCpuMs(server.pid) - serverCpuBeforeMs;
  const postgresMs = database === undefined ? 0 : postgresCpuMs() - postgresCpuBeforeMs;
  const harnessCpu = process.cpuUsage(harnessCpuBefore);
  await worker.stop({ timeoutMs: 5_000 });
  client.leaseRuns = leaseRuns;
  client.completeRunsBriefly = completeRunsBriefly;

  const rows = await runTimesOf(round);
  if (rows.length !== count) throw new Error(`${rows.length} runs for ${count} timers`);
  const stages: [string, (row: (typeof rows)[number]) => number][] = [
    ['fire -> dispatch', (row) => row.dispatched_at - row.fire_at],
    ['dispatch -> lease', (row) => row.started_at - row.dispatched_at],
    ['lease -> handler', (row) => handledAtMs[row.i]! - row.started_at],
    ['  lease -> answer', (row) => receivedAtMs[row.i]! - row.started_at],
    ['  answer -> handler', (row) => handledAtMs[row.i]! - receivedAtMs[row.i]!],
    ['fire -> answer', (row) => receivedAtMs[row.i]! - row.fire_at],
    ['fire -> handler', (row) => handledAtMs[row.i]! - row.fire_at],
  ];
  console.log(`${count} timers over ${spanMs / 1_000} s; lag stages in ms (database times are whole ms)`);
  for (const [name, stageOf] of stages) {
    const sorted = rows.map(stageOf).sort((a, b) => a - b);
    console.log(`${name.padEnd(18)} p50 ${percentile(sorted, 0.5)}  p90 ${percentile(sorted, 0.9)}  ` +
      `p99 ${percentile(sorted, 0.99)}  max ${sorted.at(-1)}`);
  }
  printGcShare(rows.map((row) => ({ dueMs: row.fire_at, handledMs: handledAtMs[row.i]! })), gcPauses);
  if (pressure !== null) {
    printWindows(rows.map((row) => ({ dueMs: row.fire_at, lagMs: handledAtMs[row.i]! - row.fire_at })), firstDueMs,
      pressure.samples);
  }
  console.log(`CPU per run: server ${((serverCpuMs * 1_000) / count).toFixed(0)} us (all threads), ` +
    `this process ${((harnessCpu.user + harnessCpu.system) / count).toFixed(0)} us` +
    (database === undefined ? '' : `, PostgreSQL ${((postgresMs * 1_000) / count).toFixed(0)} us (all its processes)`));
  const perRequest = (tally: { requests: number; runs: number }): string => (tally.runs / Math.max(1, tally.requests)).toFixed(1);
  console.log(`requests: ${leases.requests} leases of ${perRequest(leases)} runs, ` +
    `${completions.requests} completions of ${perRequest(completions)} runs`);
  const ms = (ns: number): string => (ns / 1e6).toFixed(1);
  console.log(`this process's event loop delay ms: p50 ${ms(loopDelay.percentile(50))}  p99 ${ms(loopDelay.percentile(99))}  ` +
    `p99.9 ${ms(loopDelay.percentile(99.9))}  max ${ms(loopDelay.max)}`);
  console.log(`run-queue wait, main threads: this process ${ms(runQueue.self.waitNs - runQueueBefore.self.waitNs)} ms ` +
    `over ${runQueue.self.slices - runQueueBefore.self.slices} slices, server ${ms(runQueue.server.waitNs - runQueueBefore.server.waitNs)} ms ` +
    `over ${runQueue.server.slices - runQueueBefore.server.slices}`);
}

interface GcPause {
  startMs: number;
  endMs: number;
  /** A scavenge (young generation); otherwise a mark-compact's pause or another kind. */
  minor: boolean;
}

/**
 * How many runs started `lateMs` or more late, and how many of those waited out a garbage
 * collection pause of this process (the worker's) between their due time and their start.
 */
function printGcShare(runs: readonly { dueMs: number; handledMs: number }[], pauses: readonly GcPause[]): void {
  const late = runs.filter((run) => run.handledMs - run.dueMs >= lateMs);
  const sorted = [...pauses].sort((a, b) => a.startMs - b.startMs);
  const duringGc = late.filter((run) => sorted.some((pause) => pause.endMs > run.dueMs && pause.startMs < run.handledMs));
  const scavenges = pauses.filter((pause) => pause.minor).map((pause) => pause.endMs - pause.startMs).sort((a, b) => a - b);
  const others = pauses.filter((pause) => !pause.minor).map((pause) => pause.endMs - pause.startMs);
  const sum = (values: readonly number[]): string => values.reduce((total, value) => total + value, 0).toFixed(0);
  console.log(`late (>= ${lateMs} ms): ${late.length} runs, ${duringGc.length} of them due before a GC pause of this process ` +
    `ended; its pauses meanwhile: ${scavenges.length} scavenges, ${sum(scavenges)} ms (longest ` +
    `${(scavenges.at(-1) ?? 0).toFixed(1)}), ${others.length} others, ${sum(others)} ms`);
}

interface RunTimes {
  fire_at: number;
  dispatched_at: number;
  started_at: number;
  i: number;
}

/** Each run's fire, dispatch and lease times, read from the server's store after the round. */
async function runTimesOf(round: number): Promise<RunTimes[]> {
  if (database === undefined) {
    const db = new Database(join(dataDir, 'tickler.db'), { readonly: true });
    try {
      return db.prepare(`SELECT r.fire_at, r.dispatched_at, r.started_at, json_extract(j.spec, '$.payload.i') AS i
        FROM runs r JOIN jobs j ON j.job_seq = r.job_seq WHERE json_extract(j.spec, '$.payload.round') = ?`).all(round) as RunTimes[];
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    // bigint columns arrive as text: each time is cast to a double, exact for milliseconds.
    const result = await client.query<RunTimes>(`SELECT r.fire_at::float8 AS fire_at, r.dispatched_at::float8 AS dispatched_at,
        r.started_at::float8 AS started_at, (j.spec->'payload'->>'i')::int AS i
      FROM runs r JOIN jobs j ON j.job_id = r.job_id WHERE (j.spec->'payload'->>'round')::int = $1`, [round]);
    return result.rows;
  } finally {
    await client.end();
  }
}

interface PressureSample {
  atMs: number;
  /** Cumulative µs during which some task waited for a CPU / for I/O (PSI "some" totals). */
  cpuUs: number;
  ioUs: number;
}

/** PSI totals every 50 ms (nothing where /proc/pressure is missing). */
function samplePressure(): { samples: PressureSample[]; stop(): void } {
  const samples: PressureSample[] = [];
  const someTotalUs = (resource: string): number => {
    const line = readFileSync(`/proc/pressure/${resource}`, 'utf8').split('\n').find((text) => text.startsWith('some'));
    return Number(/total=(\d+)/.exec(line ?? '')?.[1] ?? Number.NaN);
  };
  const sample = (): void => {
    try {
      samples.push({ atMs: Date.now(), cpuUs: someTotalUs('cpu'), ioUs: someTotalUs('io') });
    } catch {
      // No PSI on this kernel: the windows print without pressure.
    }
  };
  sample();
  const timer = setInterval(sample, 50);
  return { samples, stop: () => {
    clearInterval(timer);
    sample();
  } };
}


function printWindows(runs: readonly { dueMs: number; lagMs: number }[], firstDueMs: number,
  samples: readonly PressureSample[]): void {
  const windows = new Map<number, { late: number; maxLagMs: number; cpuMs: number; ioMs: number }>();
  const windowOf = (atMs: number): { late: number; maxLagMs: number; cpuMs: number; ioMs: number } => {
    const index = Math.floor((atMs - firstDueMs) / windowMs);
    let window = windows.get(index);
    if (window === undefined) {
      window = { late: 0, maxLagMs: 0, cpuMs: 0, ioMs: 0 };
      windows.set(index, window);
    }
    return window;
  };
  for (const run of runs) {
    const window = windowOf(run.dueMs);
    if (run.lagMs >= lateMs) window.late++;
    window.maxLagMs = Math.max(window.maxLagMs, run.lagMs);
  }
  for (let index = 1; index < samples.length; index++) {
    const [previous, current] = [samples[index - 1]!, samples[index]!];
    if (current.atMs < firstDueMs || !windows.has(Math.floor((current.atMs - firstDueMs) / windowMs))) continue;
    const window = windowOf(current.atMs);
    window.cpuMs += (current.cpuUs - previous.cpuUs) / 1_000;
    window.ioMs += (current.ioUs - previous.ioUs) / 1_000;
  }
  const ordered = [...windows.entries()].sort(([a], [b]) => a - b).map(([, window]) => window);
  console.log(`per ${windowMs} ms of due times: runs >= ${lateMs} ms late / max lag ms / CPU pressure ms / I/O pressure ms`);
  console.log(ordered.map((window) =>
    `${window.late}/${window.maxLagMs}/${window.cpuMs.toFixed(0)}/${window.ioMs.toFixed(0)}`).join(' '));
  const late = ordered.map((window) => window.late);
  console.log(`correlation with the late count: CPU pressure ${correlation(late, ordered.map((window) => window.cpuMs)).toFixed(2)}, ` +
    `I/O pressure ${correlation(late, ordered.map((window) => window.ioMs)).toFixed(2)}`);
}

/** Pearson's r; NaN when either side is constant. */
function correlation(a: readonly number[], b: readonly number[]): number {
  const mean = (values: readonly number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;
  const [meanA, meanB] = [mean(a), mean(b)];
  let product = 0;
  let squaresA = 0;
  let squaresB = 0;
  a.forEach((valueA, index) => {
    const [da, db] = [valueA - meanA, b[index]! - meanB];
    product += da * db;
    squaresA += da * da;
    squaresB += db * db;
  });
  return product / Math.sqrt(squaresA * squaresB);
}
