/**
 * Restart after `kill -9`: a data directory with `pendingCount` timers due next
 * week and a trickle of timers due every second from now. Once the trickle is firing, the
 * server is SIGKILLed and a new one started on the same directory at once. The figure is
 * the time from the kill until the new process dispatches again (its dispatch counter, a
 * fresh process's, polled every 20 ms), and the timers that came due while it was down must
 * fire late rather than never (checked in the ledger afterwards).
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import { createInBatches, ledgerLagsMs, nextWeekFireAtMs, oneShotAt, pollUntil, readRuns, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult } from './report.js';
import { dispatchedCount, type BenchServer } from './server-process.js';

interface RestartSizes {
  pendingCount: number;
  tricklePerS: number;
  trickleDurationS: number;
}

const fullSizes: RestartSizes = { pendingCount: 1_000_000, tricklePerS: 20, trickleDurationS: 300 };
const quickSizes: RestartSizes = { pendingCount: 1_000, tricklePerS: 20, trickleDurationS: 30 };
const trickleLeadMs = 1_000;
const firingAgainTimeoutMs = 60_000;
const quickFiringAgainTimeoutMs = 15_000;
const counterPollIntervalMs = 20;
/** How long after firing again the late timers are given before the ledger is read. */
const catchUpGraceMs = 3_000;

export const restartBenchmark: Benchmark = {
  name: 'restart',
  title: 'kill -9 with 1,000,000 pending timers, restart: time until firing again',
  run: runRestart,
};

async function runRestart(context: BenchContext): Promise<BenchResult> {
  const sizes = context.quick ? quickSizes : fullSizes;
  const notes: string[] = [];
  const dataDir = context.tempDir('tickler-bench-restart-');
  // What is measured is the scheduler's recovery after the kill: runs written ahead before it
  // (docs/tuning.md, "The server: dispatch") would cover the outage's first seconds without it.
  const env = { TICKLER_DISPATCH_AHEAD_MS: '0' };
  const first = await startManagedServer(context, 'restart-first', { dataDir, env });
  const nowMs = wallClock.nowMs();
  context.log(`restart: creating ${sizes.pendingCount} timers due next week`);
  const pending = await createInBatches(first.client, sizes.pendingCount,
    (index) => oneShotAt(nextWeekFireAtMs(nowMs, index, sizes.pendingCount), index));
  if (pending.failed > 0) notes.push(`${pending.failed} creates failed, e.g. ${pending.errorSamples[0]}`);

  const trickleCount = sizes.tricklePerS * sizes.trickleDurationS;
  const trickleStartMs = wallClock.nowMs() + trickleLeadMs;
  const trickleFireAtMs = (index: number): number => trickleStartMs + Math.floor((index * 1_000) / sizes.tricklePerS);
  await createInBatches(first.client, trickleCount, (index) => oneShotAt(trickleFireAtMs(index), sizes.pendingCount + index));
  const firing = await pollUntil(async () => (await dispatchedCount(first)) >= sizes.tricklePerS,
    { intervalMs: 100, timeoutMs: 30_000 });
  if (!firing) throw new Error('the first server never started firing the trickle; nothing to restart from');

  const killAtMs = wallClock.nowMs();
  await first.kill();
  const second = await startManagedServer(context, 'restart-second', { dataDir, env });
  const listeningAtMs = wallClock.nowMs();
  const firingAgainLimitMs = context.quick ? quickFiringAgainTimeoutMs : firingAgainTimeoutMs;
  const firedAgain = await pollUntil(async () => (await dispatchedCount(second)) > 0,
    { intervalMs: counterPollIntervalMs, timeoutMs: firingAgainLimitMs });
  const firingAgainAtMs = wallClock.nowMs();
  if (!firedAgain) notes.push(`the restarted server dispatched nothing within ${firingAgainLimitMs} ms`);
  await delay(catchUpGraceMs);

  const outage = await outageLedger(second, killAtMs, firingAgainAtMs, trickleFireAtMs, trickleCount);
  if (outage.summary.earlyCount > 0) notes.push(`EARLY: ${outage.summary.earlyCount} runs dispatched before fire_at`);
  notes.push(...await stopAndProfile(context, 'restart-second', second));
  notes.push('"firing again" is the first dispatch the restarted process counts; with timers due every ' +
    `${1_000 / sizes.tricklePerS} ms it is at most that much later than the scheduler could fire.`);
  return {
    name: restartBenchmark.name,
    title: restartBenchmark.title,
    parameters: { ...sizes, createRatePerS: Math.round(pending.created / (pending.elapsedMs / 1_000)) },
    figures: [
      { label: 'kill -9 → restarted process listening', value: (listeningAtMs - killAtMs) / 1_000, unit: 's' },
      { label: 'kill -9 → firing again', value: firedAgain ? (firingAgainAtMs - killAtMs) / 1_000 : null, unit: 's',
        target: { comparison: '<=', value: 5 } },
      { label: 'restarted process listening → firing again', value: firedAgain ? (firingAgainAtMs - listeningAtMs) / 1_000 : null, unit: 's' },
      { label: 'timers due during the outage', value: outage.expected, unit: 'timers' },
      { label: 'of those, never dispatched', value: outage.expected - outage.dispatched, unit: 'timers',
        target: { comparison: '<=', value: 0 } },
      ...latencyFigures('fire lag of timers due during the outage (ledger)', outage.summary),
    ],
    notes,
  };
}

/** The trickle timers due between the kill and firing again: all must be in the ledger, late. */
async function outageLedger(server: BenchServer, killAtMs: number, firingAgainAtMs: number,
  fireAtOf: (index: number) => number, trickleCount: number) {
  let expected = 0;
  for (let index = 0; index < trickleCount; index += 1) {
    const fireAtMs = fireAtOf(index);
    if (fireAtMs >= killAtMs && fireAtMs < firingAgainAtMs) expected += 1;
  }
  const runs = await readRuns(server.client, killAtMs, firingAgainAtMs);
  const ledger = ledgerLagsMs(runs);
  return { expected, dispatched: ledger.lagsMs.length, summary: summarise(ledger.lagsMs) };
}
