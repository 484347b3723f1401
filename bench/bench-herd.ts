/**
 * The one-shot herd: `count` timers all due at the same instant. The figure is the
 * time from that instant until the last of them is dispatched, read from the run ledger
 * (max dispatched_at − fire_at) and watched from outside on the server's dispatch counter.
 * No worker is attached: the measurement is the scheduler's, not the workers'.
 */
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import { createInBatches, isoOf, ledgerLagsMs, oneShotAt, plannedLeadMs, pollUntil, readRuns, sleepUntil, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult } from './report.js';
import { dispatchedCount } from './server-process.js';

const fullCount = 100_000;
const quickCount = 200;
const herdTimeoutMs = 120_000;
const quickHerdTimeoutMs = 15_000;
const counterPollIntervalMs = 50;

export const herdBenchmark: Benchmark = {
  name: 'herd',
  title: '100,000 one-shot timers due in the same second',
  run: runHerd,
};

async function runHerd(context: BenchContext): Promise<BenchResult> {
  const count = context.quick ? quickCount : fullCount;
  const notes: string[] = [];
  // What is measured is the dispatch of a whole herd at its instant: written ahead (the default,
  // docs/tuning.md, "The server: dispatch") it would all be ready before the instant (measured:
  // 0 s), which says nothing of how fast a herd is dispatched. bench:peers W4 measures that
  // default end to end.
  const server = await startManagedServer(context, 'herd', {
    dataDir: context.tempDir('tickler-bench-herd-'), env: { TICKLER_DISPATCH_AHEAD_MS: '0' },
  });
  const leadMs = await plannedLeadMs(server.client, count, context.quick);
  const dueMs = Math.ceil((wallClock.nowMs() + leadMs) / 1_000) * 1_000;
  context.log(`herd: creating ${count} timers all due at ${isoOf(dueMs)}`);
  const created = await createInBatches(server.client, count, (index) => oneShotAt(dueMs, index));
  if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
  if (wallClock.nowMs() > dueMs) notes.push(`the creates ended ${wallClock.nowMs() - dueMs} ms after the herd was due`);

  await sleepUntil(dueMs);
  const herdLimitMs = context.quick ? quickHerdTimeoutMs : herdTimeoutMs;
  // Outside view: the first moment the server's own counter shows every timer dispatched.
  const allDispatched = await pollUntil(async () => (await dispatchedCount(server)) >= created.created,
    { intervalMs: counterPollIntervalMs, timeoutMs: herdLimitMs });
  const counterDoneMs = wallClock.nowMs();
  if (!allDispatched) notes.push(`not all dispatched within ${herdLimitMs} ms of the due time`);

  const runs = await readRuns(server.client, dueMs, dueMs + 1);
  const ledger = ledgerLagsMs(runs);
  const summary = summarise(ledger.lagsMs);
  if (summary.earlyCount > 0) notes.push(`EARLY: ${summary.earlyCount} runs dispatched before fire_at`);
  notes.push(...await stopAndProfile(context, 'herd', server));
  const ledgerAllDispatchedS = summary.maxMs === null ? null : summary.maxMs / 1_000;
  // The ledger keeps milliseconds: a small herd (--quick) can be dispatched within the due
  // millisecond itself, a span of 0 that no rate can divide by. It counts as 1 ms then, and
  // the rate is a lower bound.
  const rateSpanS = ledgerAllDispatchedS === null ? null : Math.max(ledgerAllDispatchedS, 0.001);
  if (ledgerAllDispatchedS === 0) notes.push('every run was dispatched within the due millisecond: the rate is over 1 ms, a lower bound');
  return {
    name: herdBenchmark.name,
    title: herdBenchmark.title,
    parameters: { timers: count, createRatePerS: Math.round(created.created / (created.elapsedMs / 1_000)) },
    figures: [
      { label: 'runs in the ledger', value: runs.length, unit: 'runs', target: { comparison: '>=', value: count } },
      { label: 'runs not dispatched', value: ledger.undispatched, unit: 'runs', target: { comparison: '<=', value: 0 } },
      { label: 'due → all ready (ledger: max fire_at → ready)', value: ledgerAllDispatchedS, unit: 's',
        target: { comparison: '<=', value: 5 } },
      { label: 'due → all dispatched (outside: dispatch counter, polled every 50 ms)',
        value: allDispatched ? (counterDoneMs - dueMs) / 1_000 : null, unit: 's' },
      ...latencyFigures('fire lag (ledger)', summary),
      { label: 'dispatch rate during the herd', value: rateSpanS === null ? null : runs.length / rateSpanS, unit: 'runs/s' },
    ],
    notes,
  };
}
