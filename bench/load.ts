/**
 * Driving a server over HTTP: batched creates with a fixed number of requests in flight,
 * reading the run ledger page by page, and waiting on the server's own counters. Every
 * request goes through the SDK's TicklerClient (Node's fetch, keep-alive connections).
 */
import { setTimeout as delay } from 'node:timers/promises';
import { SystemClock } from '../src/clock.js';
import { batchJobsMax, listLimitMax } from '../src/limits.js';
import type { TicklerClient } from '../src/worker/client.js';
import type { Job, JobCreateRequest, Run } from '../src/worker/wire.js';

/** The benchmark's own view of real time; the server is measured against the same clock. */
export const wallClock = new SystemClock();

export const benchPool = 'bench';
export const weekMs = 7 * 86_400_000;

export function isoOf(epochMs: number): string {
  return new Date(epochMs).toISOString();
}

export function oneShotAt(fireAtMs: number, index: number, pool = benchPool): JobCreateRequest {
  return { schedule: { at: isoOf(fireAtMs) }, pool, payload: { n: index } };
}

/** Fire times spread over the week after `nowMs`, so creates land in many buckets and shards. */
export function nextWeekFireAtMs(nowMs: number, index: number, count: number): number {
  return nowMs + weekMs + Math.floor((index / Math.max(1, count)) * 86_400_000);
}

export interface BatchCreateOutcome {
  created: number;
  failed: number;
  elapsedMs: number;
  /** The first few error answers, for the notes. */
  errorSamples: string[];
}

/**
 * Creates `count` jobs built by `specOf(i)` in `POST /v1/jobs:batch` requests of `batchSize`,
 * keeping `concurrency` requests in flight, in index order (a late batch never overtakes an
 * early one by more than `concurrency`, so fire times are written roughly in order).
 */
export async function createInBatches(
  client: TicklerClient,
  count: number,
  specOf: (index: number) => JobCreateRequest,
  options: { batchSize?: number; concurrency?: number; onCreated?: (job: Job) => void } = {},
): Promise<BatchCreateOutcome> {
  const batchSize = Math.min(options.batchSize ?? batchJobsMax, batchJobsMax);
  const concurrency = options.concurrency ?? 2;
  const outcome: BatchCreateOutcome = { created: 0, failed: 0, elapsedMs: 0, errorSamples: [] };
  let nextIndex = 0;
  const startedMs = performance.now();
  const lane = async (): Promise<void> => {
    while (nextIndex < count) {
      const first = nextIndex;
      const last = Math.min(count, first + batchSize);
      nextIndex = last;
      const jobs: JobCreateRequest[] = [];
      for (let index = first; index < last; index += 1) jobs.push(specOf(index));
      const { results } = await client.batchCreateJobs(jobs);
      for (const result of results) {
        if ('job' in result) {
          outcome.created += 1;
          options.onCreated?.(result.job);
        } else {
          outcome.failed += 1;
          if (outcome.errorSamples.length < 3) outcome.errorSamples.push(JSON.stringify(result));
        }
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  outcome.elapsedMs = performance.now() - startedMs;
  return outcome;
}

/** Every run whose scheduled_at is in [sinceMs, untilMs), read page by page. */
export async function readRuns(client: TicklerClient, sinceMs: number, untilMs: number, pool = benchPool): Promise<Run[]> {
  const runs: Run[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listRuns({
      since: isoOf(sinceMs), until: isoOf(untilMs), pool, limit: listLimitMax,
      ...(cursor === undefined ? {} : { cursor }),
    });
    runs.push(...page.items);
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined);
  return runs;
}

/**
 * Each dispatched run's fire lag in the ledger: from fire_at until it was leasable, i.e.
 * dispatched_at − fire_at, or 0 for a one-shot run written ahead (dispatched_at before fire_at,
 * ready from fire_at: docs/tuning.md, "The server: dispatch"). A run started before its fire_at is
 * answered as a negative lag, so it counts as early. Runs never dispatched are counted apart.
 */
export function ledgerLagsMs(runs: Run[]): { lagsMs: number[]; undispatched: number } {
  const lagsMs: number[] = [];
  let undispatched = 0;
  for (const run of runs) {
    if (run.dispatched_at === null) {
      undispatched += 1;
      continue;
    }
    const fireAtMs = Date.parse(run.fire_at);
    const startedEarlyMs = run.started_at === null ? 0 : Math.min(0, Date.parse(run.started_at) - fireAtMs);
    lagsMs.push(startedEarlyMs < 0 ? startedEarlyMs : Math.max(0, Date.parse(run.dispatched_at) - fireAtMs));
  }
  return { lagsMs, undispatched };
}

/**
 * The seconds of the load (by fire_at, counted from the first due time) whose dispatches were
 * latest: periodic spikes (lease renewals every few seconds, loader refreshes every 30 s) show
 * as a regular spacing here, a backlog as one long run of late seconds.
 */
export function worstSecondsNote(runs: readonly Run[], firstDueMs: number): string {
  const maxLagBySecond = new Map<number, number>();
  for (const run of runs) {
    if (run.dispatched_at === null) continue;
    const fireAtMs = Date.parse(run.fire_at);
    const second = Math.floor((fireAtMs - firstDueMs) / 1_000);
    maxLagBySecond.set(second, Math.max(maxLagBySecond.get(second) ?? 0, Date.parse(run.dispatched_at) - fireAtMs, 0));
  }
  const worst = [...maxLagBySecond.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8).sort((a, b) => a[0] - b[0]);
  return `latest-dispatched seconds of the load (second after the first due time: max fire lag): ` +
    worst.map(([second, lagMs]) => `${second} s: ${Math.round(lagMs)} ms`).join(', ');
}

/** Polls `check` every `intervalMs` until it answers true or `timeoutMs` passes; answers whether it did. */
export async function pollUntil(check: () => Promise<boolean>, options: { intervalMs: number; timeoutMs: number }): Promise<boolean> {
  const deadlineMs = performance.now() + options.timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (performance.now() >= deadlineMs) return false;
    await delay(options.intervalMs);
  }
}

/** Sleeps until real time reaches `atMs` (the benchmark measures real time; there is no event to wait on). */
export async function sleepUntil(atMs: number): Promise<void> {
  const waitMs = atMs - wallClock.nowMs();
  if (waitMs > 0) await delay(waitMs);
}

export function megabytes(bytes: number): number {
  return bytes / 1_048_576;
}

export function maxOf(values: number[]): number | null {
  let max: number | null = null;
  for (const value of values) if (max === null || value > max) max = value;
  return max;
}

export function minOf(values: number[]): number | null {
  let min: number | null = null;
  for (const value of values) if (min === null || value < min) min = value;
  return min;
}

/**
 * How far ahead the first timer of a `count`-timer load must be due so that all of it is
 * created first: measures this server's create rate now (on timers due next week, which do
 * not disturb the window) and allows half as long again plus a margin. A fixed guess is
 * wrong on a shared, noisy machine.
 */
export async function plannedLeadMs(client: TicklerClient, count: number, quick: boolean): Promise<number> {
  const calibrationCount = quick ? 100 : 20_000;
  const nowMs = wallClock.nowMs();
  const calibration = await createInBatches(client, calibrationCount,
    (index) => oneShotAt(nextWeekFireAtMs(nowMs, index, calibrationCount), index, `${benchPool}-calibration`));
  const ratePerS = calibration.created / (calibration.elapsedMs / 1_000);
  const marginMs = quick ? 1_000 : 5_000;
  return Math.ceil((count / ratePerS) * 1_500) + marginMs;
}
