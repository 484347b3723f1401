/**
 * Retry ready time → handler start, with an SDK worker parked on its next lease (the default
 * worker parks one while each completion is in flight). Every job fails its first attempt;
 * its retry comes due about a second later (`retry.base_s` 1, ±20 %) and the lag is read
 * from the retry's `ready_at`. A parked lease that the failure does not wake answers empty
 * only at its `wait_s`, so a lost wake-up shows here as a lag near 20 s.
 *
 * Then the worker stops with retries still to come, and the server's CPU is read over a quiet
 * window while they come due with no one to take them: the lease sweeper must not spin on a
 * ready time already past.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createWorker } from '../src/worker/worker.js';
import type { BenchContext, Benchmark } from './context.js';
import { LatencyRecorder, latencyFigures } from './latency.js';
import { benchPool, createInBatches, oneShotAt, wallClock } from './load.js';
import { processCpuMs } from './proc-cpu.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult } from './report.js';

interface RetrySizes {
  jobs: number;
  spacingMs: number;
  idleWindowMs: number;
}

const fullSizes: RetrySizes = { jobs: 200, spacingMs: 50, idleWindowMs: 10_000 };
const quickSizes: RetrySizes = { jobs: 10, spacingMs: 50, idleWindowMs: 1_000 };
const leadMs = 1_000;
const drainTimeoutMs = 30_000;
const idleJobs = 100;

export const retryWakeupBenchmark: Benchmark = {
  name: 'retry-wakeup',
  title: 'retry ready time → handler start with a parked SDK worker; server CPU with due retries and no worker',
  run: runRetryWakeup,
};

async function runRetryWakeup(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const notes: string[] = [];
  const server = await startManagedServer(context, 'retry-wakeup', { dataDir: context.tempDir('tickler-bench-retry-') });
  const recorder = new LatencyRecorder();
  let retried = 0;
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  const worker = createWorker({
    baseUrl: server.url,
    pool: benchPool,
    concurrency: 4,
    handler: (run) => {
      if (run.attempt === 1) throw new Error('first attempt fails');
      recorder.record(wallClock.nowMs() - Date.parse(run.ready_at ?? run.fire_at));
      retried += 1;
      if (retried === sizes.jobs) resolveDone();
    },
  });
  worker.start();
  context.defer(() => worker.stop({ timeoutMs: 5_000 }));
  const retry = { max_attempts: 2, base_s: 1, max_s: 1 };
  const firstDueMs = wallClock.nowMs() + leadMs;
  const created = await createInBatches(server.client, sizes.jobs,
    (index) => ({ ...oneShotAt(firstDueMs + index * sizes.spacingMs, index), retry }));
  if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
  const drained = await Promise.race([done.then(() => true), sleep(drainTimeoutMs + sizes.jobs * sizes.spacingMs, false)]);
  if (!drained) notes.push(`only ${retried} of ${sizes.jobs} retries were handled`);
  await worker.stop({ timeoutMs: 5_000 });

  // The server's own idle CPU (shard renewals, the reconciler), then with retries due and no
  // worker: they must add nothing measurable.
  const baselineCpuMs = processCpuMs(server.pid);
  await sleep(sizes.idleWindowMs);
  const baselineShare = (processCpuMs(server.pid) - baselineCpuMs) / sizes.idleWindowMs;
  const idleWorker = createWorker({
    baseUrl: server.url, pool: 'retry-idle', concurrency: 4,
    handler: () => {
      throw new Error('fails once, and no one takes the retry');
    },
  });
  idleWorker.start();
  const idleDueMs = wallClock.nowMs() + 200;
  await createInBatches(server.client, idleJobs,
    (index) => ({ ...oneShotAt(idleDueMs, index, 'retry-idle'), retry: { max_attempts: 3, base_s: 1, max_s: 1 } }));
  await sleep(800);
  await idleWorker.stop({ timeoutMs: 5_000 });
  await sleep(1_500); // every retry is past its ready time now
  const cpuBeforeMs = processCpuMs(server.pid);
  await sleep(sizes.idleWindowMs);
  const idleCpuShare = (processCpuMs(server.pid) - cpuBeforeMs) / sizes.idleWindowMs;
  const waiting = (await server.client.listRuns({ status: 'retry_wait', limit: 1_000 })).items.length;
  notes.push(`${waiting} runs in retry_wait, past their ready time, during the idle window`);
  notes.push(...await stopAndProfile(context, 'retry-wakeup', server));
  return {
    name: retryWakeupBenchmark.name,
    title: retryWakeupBenchmark.title,
    parameters: { ...sizes, workerConcurrency: 4, retryBaseS: 1, idleRetries: idleJobs },
    figures: [
      { label: 'retries handled', value: retried, unit: 'runs', target: { comparison: '>=', value: sizes.jobs } },
      ...latencyFigures('retry ready → SDK handler start', recorder.summary(), { p99Ms: 50 }),
      { label: 'server CPU, idle', value: Math.round(baselineShare * 1_000) / 10, unit: '% of a core' },
      { label: 'server CPU, idle with due retries', value: Math.round(idleCpuShare * 1_000) / 10, unit: '% of a core' },
      { label: 'server CPU added by due retries', value: Math.round((idleCpuShare - baselineShare) * 1_000) / 10,
        unit: '% of a core', target: { comparison: '<=', value: 0.5 } },
    ],
    notes,
  };
}
