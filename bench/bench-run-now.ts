/**
 * "Run this now" on an idle system: one-shot jobs created due at the moment their create is
 * sent (`at` = now), one at a time, with an SDK worker long-polling their pool. The figure is
 * create sent → handler start, the whole trip a job enqueued for now takes: with dispatching at
 * create (the default) the create's own transaction makes the run ready and wakes the parked
 * long-poll; with `TICKLER_DISPATCH_AT_CREATE=0` in the environment the server writes a timer,
 * its scheduler wheels and dispatches it, and only then is the run ready.
 */
import type { BenchContext, Benchmark } from './context.js';
import { LatencyRecorder, latencyFigures, summarise } from './latency.js';
import { ledgerLagsMs, oneShotAt, readRuns, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult } from './report.js';
import { startWorkerProbe } from './worker-probe.js';

interface RunNowSizes {
  jobs: number;
  spacingMs: number;
}

const fullSizes: RunNowSizes = { jobs: 400, spacingMs: 25 };
const quickSizes: RunNowSizes = { jobs: 10, spacingMs: 25 };
const drainTimeoutMs = 10_000;

export const runNowBenchmark: Benchmark = {
  name: 'run-now',
  title: 'a job due when created: create sent → worker handler start on an idle system',
  run: runRunNow,
};

async function runRunNow(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const notes: string[] = [];
  const dispatchAtCreate = process.env['TICKLER_DISPATCH_AT_CREATE'] !== '0';
  const server = await startManagedServer(context, 'run-now', { dataDir: context.tempDir('tickler-bench-run-now-') });
  const worker = startWorkerProbe({ baseUrl: server.url, concurrency: 4 });
  context.defer(() => worker.stop());

  const createRoundTrip = new LatencyRecorder();
  const firstMs = wallClock.nowMs();
  let answeredDone = 0;
  let failed = 0;
  for (let index = 0; index < sizes.jobs; index++) {
    // `at` has millisecond precision: the job is due at the millisecond its create is sent.
    const sentMs = wallClock.nowMs();
    try {
      const job = await server.client.createJob(oneShotAt(Math.floor(sentMs), index));
      createRoundTrip.record(wallClock.nowMs() - sentMs);
      if (job.state === 'done') answeredDone++;
    } catch (error) {
      failed++;
      if (failed === 1) notes.push(`a create failed: ${(error as Error).message}`);
    }
    await new Promise((resolve) => setTimeout(resolve, sizes.spacingMs));
  }
  const drained = await worker.waitForHandled(sizes.jobs - failed, drainTimeoutMs);
  if (!drained) notes.push(`the worker handled ${worker.handledCount} of ${sizes.jobs - failed} runs`);
  await worker.stop();
  if (worker.problems.count > 0) notes.push(`worker problems: ${worker.problems.count}, e.g. ${worker.problems.samples.join(' | ')}`);

  const ledger = ledgerLagsMs(await readRuns(server.client, firstMs - 1, wallClock.nowMs()));
  const workerSummary = worker.lagSummary();
  notes.push(`dispatching at create ${dispatchAtCreate ? 'on (the default)' : 'off (TICKLER_DISPATCH_AT_CREATE=0)'}; ` +
    `${answeredDone} of ${sizes.jobs} creates answered the job done`);
  if (workerSummary.earlyCount > 0) notes.push(`EARLY: ${workerSummary.earlyCount} handled before fire_at`);
  notes.push(...await stopAndProfile(context, 'run-now', server));
  return {
    name: runNowBenchmark.name,
    title: runNowBenchmark.title,
    parameters: { ...sizes, workerConcurrency: 4, dispatchAtCreate: dispatchAtCreate ? 'on' : 'off' },
    figures: [
      { label: 'runs handled', value: workerSummary.count, unit: 'runs', target: { comparison: '>=', value: sizes.jobs } },
      ...latencyFigures('create sent → SDK handler start', workerSummary, { p99Ms: 50 }),
      ...latencyFigures('create round trip', createRoundTrip.summary()),
      ...latencyFigures('fire lag (ledger)', summarise(ledger.lagsMs)),
    ],
    notes,
  };
}
