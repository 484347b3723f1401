/**
 * Fire precision under steady load: `ratePerS` one-shot timers due every second for
 * `durationS` seconds, fire times evenly spaced, all created ahead in batches (the first one
 * is due only after the creates are expected to be done, so create load does not overlap
 * the measurement). An SDK worker handles every run while they fire.
 *
 * Two lags, both measured: fire lag from the run ledger (dispatched_at − fire_at, what the
 * server recorded) and due → handler start at the worker (what a user sees, on the
 * benchmark's clock, which is the same machine's clock as the server's).
 */
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import {
  createInBatches, isoOf, ledgerLagsMs, oneShotAt, plannedLeadMs, readRuns, sleepUntil, wallClock, worstSecondsNote,
} from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult, Figure } from './report.js';
import { startWorkerProbe } from './worker-probe.js';

interface PrecisionSizes {
  ratePerS: number;
  durationS: number;
  workerConcurrency: number;
}

const fullSizes: PrecisionSizes = { ratePerS: 5_000, durationS: 60, workerConcurrency: 500 };
const quickSizes: PrecisionSizes = { ratePerS: 50, durationS: 2, workerConcurrency: 10 };
const drainTimeoutMs = 60_000;
const quickDrainTimeoutMs = 15_000;

export const precisionBenchmark: Benchmark = {
  name: 'precision',
  title: 'fire lag with 5,000 timers due per second for 60 s',
  run: runPrecision,
};

async function runPrecision(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const count = sizes.ratePerS * sizes.durationS;
  const notes: string[] = [];
  const server = await startManagedServer(context, 'precision', { dataDir: context.tempDir('tickler-bench-precision-') });
  const worker = startWorkerProbe({ baseUrl: server.url, concurrency: sizes.workerConcurrency });
  context.defer(() => worker.stop());

  const firstDueMs = wallClock.nowMs() + await plannedLeadMs(server.client, count, context.quick);
  const spacingMs = 1_000 / sizes.ratePerS;
  const fireAtOf = (index: number): number => firstDueMs + Math.floor(index * spacingMs);
  context.log(`precision: creating ${count} timers due from ${isoOf(firstDueMs)} at ${sizes.ratePerS}/s`);
  const created = await createInBatches(server.client, count, (index) => oneShotAt(fireAtOf(index), index));
  const createdAtMs = wallClock.nowMs();
  if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
  if (createdAtMs > firstDueMs) {
    notes.push(`the creates ended ${createdAtMs - firstDueMs} ms after the first timer was due: ` +
      'the first seconds overlapped create load');
  }

  const lastDueMs = fireAtOf(count - 1);
  await sleepUntil(lastDueMs);
  context.log('precision: last timer due; draining');
  const drainLimitMs = context.quick ? quickDrainTimeoutMs : drainTimeoutMs;
  const drained = await worker.waitForHandled(created.created, drainLimitMs);
  if (!drained) notes.push(`the worker handled ${worker.handledCount} of ${created.created} runs within ${drainLimitMs} ms of the last due time`);
  await worker.stop();

  const runs = await readRuns(server.client, firstDueMs, lastDueMs + 1);
  const ledger = ledgerLagsMs(runs);
  const ledgerSummary = summarise(ledger.lagsMs);
  const workerSummary = worker.lagSummary();
  notes.push(worstSecondsNote(runs, firstDueMs));
  if (worker.problems.count > 0) notes.push(`worker problems: ${worker.problems.count}, e.g. ${worker.problems.samples.join(' | ')}`);
  if (ledgerSummary.earlyCount > 0 || workerSummary.earlyCount > 0) {
    notes.push(`EARLY: ${ledgerSummary.earlyCount} runs dispatched and ${workerSummary.earlyCount} handled before fire_at`);
  }
  notes.push(...await stopAndProfile(context, 'precision', server));
  const figures: Figure[] = [
    { label: 'timers created', value: created.created, unit: 'timers' },
    { label: 'runs in the ledger', value: runs.length, unit: 'runs', target: { comparison: '>=', value: count } },
    { label: 'runs not dispatched', value: ledger.undispatched, unit: 'runs', target: { comparison: '<=', value: 0 } },
    ...latencyFigures('fire lag (ledger: fire_at → ready)', ledgerSummary, { p99Ms: 100, maxMs: 500 }),
    { label: 'runs handled by the SDK worker', value: workerSummary.count, unit: 'runs' },
    ...latencyFigures('due → SDK handler start', workerSummary),
  ];
  return {
    name: precisionBenchmark.name,
    title: precisionBenchmark.title,
    parameters: { ...sizes, timers: count, batchSize: 1_000, createRatePerS: Math.round(created.created / (created.elapsedMs / 1_000)) },
    figures,
    notes,
  };
}
