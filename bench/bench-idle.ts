/**
 * Due → worker handler start on an idle system: timers `spacingMs` apart, one at a
 * time, and an SDK worker long-polling for them. With a long-poll that the dispatch wakes,
 * the handler starts one round trip after the dispatch; a polling sleep anywhere in the
 * path shows up here as a lag of about its period.
 */
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import { createInBatches, ledgerLagsMs, oneShotAt, readRuns, sleepUntil, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult } from './report.js';
import { startWorkerProbe } from './worker-probe.js';

interface IdleSizes {
  timers: number;
  spacingMs: number;
}

const fullSizes: IdleSizes = { timers: 200, spacingMs: 100 };
const quickSizes: IdleSizes = { timers: 10, spacingMs: 50 };
const leadMs = 2_000;
const drainTimeoutMs = 10_000;

export const idleBenchmark: Benchmark = {
  name: 'idle',
  title: 'due → worker handler start on an idle system',
  run: runIdle,
};

async function runIdle(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const notes: string[] = [];
  const server = await startManagedServer(context, 'idle', { dataDir: context.tempDir('tickler-bench-idle-') });
  const worker = startWorkerProbe({ baseUrl: server.url, concurrency: 4 });
  context.defer(() => worker.stop());

  const firstDueMs = wallClock.nowMs() + leadMs;
  const fireAtOf = (index: number): number => firstDueMs + index * sizes.spacingMs;
  const created = await createInBatches(server.client, sizes.timers, (index) => oneShotAt(fireAtOf(index), index));
  if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
  const lastDueMs = fireAtOf(sizes.timers - 1);
  await sleepUntil(lastDueMs);
  const drained = await worker.waitForHandled(created.created, drainTimeoutMs);
  if (!drained) notes.push(`the worker handled ${worker.handledCount} of ${created.created} runs`);
  await worker.stop();
  if (worker.problems.count > 0) notes.push(`worker problems: ${worker.problems.count}, e.g. ${worker.problems.samples.join(' | ')}`);

  const ledger = ledgerLagsMs(await readRuns(server.client, firstDueMs, lastDueMs + 1));
  const workerSummary = worker.lagSummary();
  const ledgerSummary = summarise(ledger.lagsMs);
  if (workerSummary.earlyCount > 0 || ledgerSummary.earlyCount > 0) {
    notes.push(`EARLY: ${ledgerSummary.earlyCount} dispatched and ${workerSummary.earlyCount} handled before fire_at`);
  }
  notes.push(...await stopAndProfile(context, 'idle', server));
  return {
    name: idleBenchmark.name,
    title: idleBenchmark.title,
    parameters: { ...sizes, workerConcurrency: 4 },
    figures: [
      { label: 'runs handled', value: workerSummary.count, unit: 'runs', target: { comparison: '>=', value: sizes.timers } },
      ...latencyFigures('due → SDK handler start', workerSummary, { p99Ms: 50 }),
      ...latencyFigures('fire lag (ledger)', ledgerSummary),
    ],
    notes,
  };
}
