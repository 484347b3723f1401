/**
 * The ceiling of a worker straight to PostgreSQL: W3's drain through the Store API alone, no
 * HTTP and no SDK. Creates N one-shot jobs due at t0 and dispatches them, then `--loops` loops
 * each lease up to `--lease-max` runs and complete them while their next lease runs, until
 * the pool is empty. Prints the drain's rate, the machine's CPU per run (all processes, from
 * /proc/stat, so PostgreSQL must run on this machine) and this process's.
 *
 *   node --import tsx bench/probes/pg-direct-drain.ts [--runs 50000] [--loops 2] [--lease-max 100]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import { openPostgresStore } from '../../src/store/postgres/index.js';
import type { DispatchItem, LeasedRun } from '../../src/store/store.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

const { values: options } = parseArgs({
  options: {
    runs: { type: 'string', default: '50000' },
    loops: { type: 'string', default: '2' },
    'lease-max': { type: 'string', default: '100' },
  },
});
const runCount = Number(options.runs);
const loops = Number(options.loops);
const leaseMax = Number(options['lease-max']);
const url = withDefaultUser(process.env['TICKLER_TEST_PG'] ?? 'postgres://127.0.0.1:5432/test');
const schema = `drain_${process.pid}`;
const store = await openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 10 });

try {
  const createdAtMs = t0Ms - 60_000;
  // Job ids grow in creation order, as a server's do (see store-cost-phases.ts).
  const jobs = Array.from({ length: runCount }, (_, index) =>
    jobRecord(jobSpec({ schedule: { at: new Date(t0Ms).toISOString() }, overlap: 'forbid', payload: { index } }),
      createdAtMs - runCount + index));
  for (let first = 0; first < jobs.length; first += 1_000) {
    await store.createJobs(jobs.slice(first, first + 1_000).map((job) => ({ job, timer: timerAt(t0Ms) })), createdAtMs);
  }
  const shards = [...new Set(jobs.map((job) => job.shard))];
  const tokens = new Map((await store.acquireShardLeases('drain-node', shards, 3_600_000, t0Ms))
    .map((lease) => [lease.shard, lease.token]));
  const timers = await store.loadTimers({ shards, untilMs: t0Ms + 1, limit: runCount + 1 });
  const items: DispatchItem[] = timers.map((timer) => ({
    shard: timer.shard, shardToken: tokens.get(timer.shard)!, timerId: timer.timerId, jobId: timer.jobId,
    occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }], nextTimer: null,
  }));
  for (let first = 0; first < items.length; first += 500) await store.dispatch(items.slice(first, first + 500), t0Ms + 10);
  // Let autovacuum's and the checkpointer's reaction to the load settle a little first.
  await new Promise((resolve) => setTimeout(resolve, 3_000));

  const machineBefore = machineTicks();
  const processBefore = process.cpuUsage();
  const startedMs = performance.now();
  let completed = 0;
  const drain = async (loop: number): Promise<void> => {
    let completing: Promise<unknown> = Promise.resolve();
    for (;;) {
      const leased: LeasedRun[] = await store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: leaseMax, leaseMs: null,
        workerId: `loop-${loop}`, nowMs: t0Ms + 20 });
      if (leased.length === 0) break;
      await completing;
      completing = Promise.all(leased.map((run) => store.completeRun({ team: 'team-a', runId: run.runId,
        fencingToken: run.fencingToken, status: 'succeeded', error: null, result: null, nowMs: t0Ms + 30, wantRun: false })))
        .then((outcomes) => {
          if (outcomes.some((outcome) => outcome.kind !== 'accepted')) throw new Error('a completion was not accepted');
          completed += leased.length;
        });
    }
    await completing;
  };
  await Promise.all(Array.from({ length: loops }, (_, loop) => drain(loop)));
  const elapsedMs = performance.now() - startedMs;
  const machine = machineTicks();
  const own = process.cpuUsage(processBefore);
  if (completed !== runCount) throw new Error(`completed ${completed} of ${runCount} runs`);
  const busyShare = (machine.busy - machineBefore.busy) / (machine.all - machineBefore.all);
  const cores = (readFileSync('/proc/stat', 'utf8').match(/^cpu\d+ /gm) ?? []).length;
  console.log(`${completed} runs in ${Math.round(elapsedMs)} ms, ${loops} loops leasing ${leaseMax}: ` +
    `${Math.round((completed * 1_000) / elapsedMs)} runs/s; machine ${(busyShare * cores).toFixed(2)} of ${cores} cores busy, ` +
    `${((busyShare * cores * elapsedMs * 1_000) / completed).toFixed(1)} us of CPU per run; ` +
    `this process ${((own.user + own.system) / completed).toFixed(1)} us per run`);
} finally {
  await store.pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await store.close();
}

/** The machine's CPU ticks so far: busy (user, nice, system, irq, softirq) and all. */
function machineTicks(): { busy: number; all: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  return { busy: fields[0]! + fields[1]! + fields[2]! + fields[5]! + fields[6]!, all: fields.reduce((sum, value) => sum + value, 0) };
}
