/**
 * The cron herd: `count` recurring jobs on the same daily schedule, all first due
 * at the same midnight. With the default tolerance their fire times spread over the jitter
 * window; with `tolerance_s: 0` they are all due at 00:00:00 and the dispatcher must keep
 * fire lag p99 within 5 s. Measured two ways:
 *   - virtual clock: `--virtual-clock --start-at 23:59:00Z`, then one `POST /v1/clock/advance`
 *     across midnight and the window. Lags are in virtual time (the clock waits for each
 *     dispatch, so they show ordering, not speed); the wall time of the advance is the cost.
 *   - real time: a 6-field cron for a second shortly ahead (`S M H * * *`, the same shape),
 *     so the lags are real. The window of case (a) is the server's default tolerance, set
 *     with --cron-tolerance-default-s to keep the wall time bounded (said in the figures).
 */
import type { BenchContext, Benchmark } from './context.js';
import { latencyFigures, summarise } from './latency.js';
import { benchPool, createInBatches, isoOf, ledgerLagsMs, maxOf, minOf, plannedLeadMs, pollUntil, readRuns,
  sleepUntil, wallClock } from './load.js';
import { startManagedServer, stopAndProfile } from './profile.js';
import type { BenchResult, Figure } from './report.js';
import { dispatchedCount } from './server-process.js';
import type { TicklerClient } from '../src/worker/client.js';
import type { JobCreateRequest, Run } from '../src/worker/wire.js';

const fullCount = 100_000;
const quickCount = 100;
/** A minute before a midnight; any would do, a year's end is the classic herd. */
const virtualStartAt = '2026-12-31T23:59:00.000Z';
const virtualMidnightMs = Date.parse('2027-01-01T00:00:00.000Z');
const drainTimeoutMs = 120_000;
/** Virtual seconds per `POST /v1/clock/advance`; the sum of their wall times is the figure. */
const advanceStepS = 10;
/** Past midnight, the whole 300 s window, and a minute to spare. */
const advanceTotalS = 60 + 300 + 60;
/** Wall time the advance may take before the benchmark stops and reports how far it got. */
const advanceBudgetMs = 150_000;
const quickAdvanceBudgetMs = 30_000;
/** A quick run must not hang a test for minutes when the server never dispatches. */
const quickDrainTimeoutMs = 15_000;

type ToleranceCase = { label: string; toleranceS: number | null };

export const cronHerdVirtualBenchmark: Benchmark = {
  name: 'cron-herd-virtual',
  title: '100,000 jobs on `0 0 * * *` under the virtual clock: default tolerance and tolerance_s 0',
  run: runVirtual,
};

export const cronHerdRealBenchmark: Benchmark = {
  name: 'cron-herd-real',
  title: '100,000 jobs on one daily second in real time: a short default tolerance and tolerance_s 0',
  run: runReal,
};

function jobOf(cron: string, toleranceS: number | null): JobCreateRequest {
  return { schedule: { cron, tz: 'UTC' }, pool: benchPool, ...(toleranceS === null ? {} : { tolerance_s: toleranceS }) };
}

function spreadS(valuesMs: number[]): number | null {
  const min = minOf(valuesMs);
  const max = maxOf(valuesMs);
  return min === null || max === null ? null : (max - min) / 1_000;
}

/** Spread of fire times and of dispatch times, lag quantiles, and how many never dispatched. */
function herdFigures(prefix: string, runs: Run[], count: number, lagTargetMsP99: number | undefined): Figure[] {
  const fireAtsMs = runs.map((run) => Date.parse(run.fire_at));
  const dispatchedAtsMs = runs.flatMap((run) => (run.dispatched_at === null ? [] : [Date.parse(run.dispatched_at)]));
  const ledger = ledgerLagsMs(runs);
  return [
    { label: `${prefix}: runs in the ledger`, value: runs.length, unit: 'runs', target: { comparison: '>=', value: count } },
    { label: `${prefix}: runs not dispatched`, value: ledger.undispatched, unit: 'runs', target: { comparison: '<=', value: 0 } },
    { label: `${prefix}: fire_at spread (max − min)`, value: spreadS(fireAtsMs), unit: 's' },
    { label: `${prefix}: dispatch spread (max − min dispatched_at)`, value: spreadS(dispatchedAtsMs), unit: 's' },
    ...latencyFigures(`${prefix}: fire lag (ledger: fire_at → ready)`, summarise(ledger.lagsMs),
      lagTargetMsP99 === undefined ? {} : { p99Ms: lagTargetMsP99 }),
  ];
}

async function runVirtual(context: BenchContext): Promise<BenchResult> {
  const count = context.quick ? quickCount : fullCount;
  const figures: Figure[] = [];
  const notes: string[] = [];
  const cases: ToleranceCase[] = [{ label: '(a) default tolerance (300 s)', toleranceS: null }, { label: '(b) tolerance_s 0', toleranceS: 0 }];
  for (const toleranceCase of cases) {
    const profileLabel = `cron-herd-virtual-${toleranceCase.toleranceS ?? 'default'}`;
    const server = await startManagedServer(context, profileLabel, {
      dataDir: context.tempDir('tickler-bench-cron-virtual-'), args: ['--virtual-clock', '--start-at', virtualStartAt],
    });
    context.log(`cron-herd-virtual ${toleranceCase.label}: creating ${count} jobs`);
    const nextFireAtsMs: number[] = [];
    const created = await createInBatches(server.client, count, () => jobOf('0 0 * * *', toleranceCase.toleranceS),
      { onCreated: (job) => { if (job.next_fire_at !== null) nextFireAtsMs.push(Date.parse(job.next_fire_at)); } });
    if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
    const advance = await advanceWithinBudget(context, server.client, toleranceCase.label);
    if (advance.advancedS < advanceTotalS) {
      notes.push(`${toleranceCase.label}: the advance reached only ${advance.advancedS} of ${advanceTotalS} virtual seconds ` +
        `within its ${advance.budgetS} s wall-time budget; the figures cover what was dispatched by then.`);
    }
    const runs = await readRuns(server.client, virtualMidnightMs, virtualMidnightMs + 1);
    const dispatched = runs.filter((run) => run.dispatched_at !== null).length;
    figures.push(
      { label: `${toleranceCase.label}, virtual: fire_at spread of the jobs (max − min next_fire_at)`,
        value: spreadS(nextFireAtsMs), unit: 's' },
      ...herdFigures(`${toleranceCase.label}, virtual`, runs, count, toleranceCase.toleranceS === 0 ? 5_000 : undefined),
      { label: `${toleranceCase.label}, virtual: virtual seconds advanced`, value: advance.advancedS, unit: 's',
        target: { comparison: '>=', value: advanceTotalS } },
      { label: `${toleranceCase.label}, virtual: wall time of the advance (${advanceStepS} s steps)`, value: advance.wallS, unit: 's' },
      { label: `${toleranceCase.label}, virtual: dispatches per wall second while advancing`,
        value: advance.wallS > 0 ? dispatched / advance.wallS : null, unit: 'runs/s' },
    );
    notes.push(...await stopAndProfile(context, profileLabel, server));
  }
  notes.push('Under the virtual clock an advance waits for each dispatch before time moves on, so virtual lags ' +
    'measure order, not speed; the wall time of the advance is what the herd cost.');
  return {
    name: cronHerdVirtualBenchmark.name,
    title: cronHerdVirtualBenchmark.title,
    parameters: { jobs: count, cron: '0 0 * * *', tz: 'UTC', startAt: virtualStartAt },
    figures,
    notes,
  };
}

/** Advances the virtual clock in steps until `advanceTotalS` or the wall-time budget runs out. */
async function advanceWithinBudget(context: BenchContext, client: TicklerClient, label: string):
  Promise<{ advancedS: number; wallS: number; budgetS: number }> {
  const budgetMs = context.quick ? quickAdvanceBudgetMs : advanceBudgetMs;
  const startedMs = performance.now();
  let advancedS = 0;
  // In steps: one advance across the whole herd can outlast fetch's 300 s headers timeout.
  while (advancedS < advanceTotalS && performance.now() - startedMs < budgetMs) {
    const stepS = Math.min(advanceStepS, advanceTotalS - advancedS);
    await client.advanceClock(stepS, { timeoutMs: 900_000 });
    advancedS += stepS;
  }
  const wallS = (performance.now() - startedMs) / 1_000;
  context.log(`cron-herd-virtual ${label}: advanced ${advancedS} s in ${wallS.toFixed(1)} s of wall time`);
  return { advancedS, wallS, budgetS: budgetMs / 1_000 };
}

/** `S M H * * *` for the UTC second of `atMs`: the daily shape of `0 0 * * *`, due shortly. */
export function dailyCronAt(atMs: number): string {
  const at = new Date(atMs);
  return `${at.getUTCSeconds()} ${at.getUTCMinutes()} ${at.getUTCHours()} * * *`;
}

async function runReal(context: BenchContext): Promise<BenchResult> {
  const count = context.quick ? quickCount : fullCount;
  const defaultToleranceS = context.quick ? 2 : 90;
  const figures: Figure[] = [];
  const notes: string[] = [];
  const cases: ToleranceCase[] = [
    { label: `(a) default tolerance (server default ${defaultToleranceS} s)`, toleranceS: null },
    { label: '(b) tolerance_s 0', toleranceS: 0 },
  ];
  const drainLimitMs = context.quick ? quickDrainTimeoutMs : drainTimeoutMs;
  for (const toleranceCase of cases) {
    const profileLabel = `cron-herd-real-${toleranceCase.toleranceS ?? 'default'}`;
    const server = await startManagedServer(context, profileLabel, {
      dataDir: context.tempDir('tickler-bench-cron-real-'),
      args: ['--cron-tolerance-default-s', String(defaultToleranceS)],
    });
    const leadMs = await plannedLeadMs(server.client, count, context.quick);
    const dueMs = Math.ceil((wallClock.nowMs() + leadMs) / 1_000) * 1_000;
    const cron = dailyCronAt(dueMs);
    context.log(`cron-herd-real ${toleranceCase.label}: creating ${count} jobs on '${cron}' (first due ${isoOf(dueMs)})`);
    const created = await createInBatches(server.client, count, () => jobOf(cron, toleranceCase.toleranceS));
    if (created.failed > 0) notes.push(`${created.failed} creates failed, e.g. ${created.errorSamples[0]}`);
    if (wallClock.nowMs() > dueMs) notes.push(`${toleranceCase.label}: the creates ended after the herd was due`);
    const windowMs = (toleranceCase.toleranceS ?? defaultToleranceS) * 1_000;
    await sleepUntil(dueMs + windowMs);
    const allDispatched = await pollUntil(async () => (await dispatchedCount(server)) >= created.created,
      { intervalMs: 100, timeoutMs: drainLimitMs });
    if (!allDispatched) notes.push(`${toleranceCase.label}: not all dispatched ${drainLimitMs} ms after the window closed`);
    const runs = await readRuns(server.client, dueMs, dueMs + 1);
    figures.push(...herdFigures(`${toleranceCase.label}, real time`, runs, count, toleranceCase.toleranceS === 0 ? 5_000 : undefined));
    notes.push(...await stopAndProfile(context, profileLabel, server));
  }
  notes.push(`Case (a) runs with --cron-tolerance-default-s ${defaultToleranceS} so that it ends within a few minutes; ` +
    'the 300 s default is measured under the virtual clock.');
  return {
    name: cronHerdRealBenchmark.name,
    title: cronHerdRealBenchmark.title,
    parameters: { jobs: count, cron: 'S M H * * * (one second, daily)', tz: 'UTC', defaultToleranceS },
    figures,
    notes,
  };
}
