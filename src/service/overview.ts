/**
 * The operator's overview: fire lag of the last hour (from the ledger: dispatch time minus
 * fire time), occurrences due per minute ahead (the herd calendar, from the pending timers),
 * the backlog per pool, failing runs, silent jobs and the stale-token rejections this node has
 * counted. Every read is bounded; a count that hit its bound says so (`capped`).
 */
import { compileSchedule, occurrencesAfter } from '../domain/schedule.js';
import type { RunRecord, RunStatus } from '../domain/types.js';
import type { Metrics } from '../obs/metrics.js';
import type { SilentJob, Store, TeamScope } from '../store/store.js';
import { fireLagMs } from './occurrences.js';

export const overviewLimits = {
  /** Runs read for the fire-lag figures and for each backlog status. */
  runsMax: 10_000,
  /** Active jobs read for the calendar ahead. */
  jobsMax: 5_000,
  minutesAhead: 60,
  failingListed: 10,
  silentListed: 20,
};

const minuteMs = 60_000;
const hourMs = 3_600_000;

export interface LagMinute {
  minuteMs: number;
  count: number;
  p50Ms: number;
  p99Ms: number;
}

export interface Overview {
  nowMs: number;
  fireLag: { count: number; p50Ms: number | null; p99Ms: number | null; perMinute: LagMinute[]; capped: boolean };
  dueAhead: { perMinute: { minuteMs: number; count: number }[]; capped: boolean };
  backlog: { pool: string; ready: number; running: number; retryWait: number }[];
  backlogCapped: boolean;
  failing: { deadLastDay: number; retryWait: number; latest: RunRecord[]; capped: boolean };
  silent: SilentJob[];
  staleTokens: { heartbeat: number; complete: number; dispatch: number };
}

/** The nearest-rank percentile of sorted values. */
export function percentile(sorted: readonly number[], fraction: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1))]!;
}

async function readRuns(store: Store, filter: { team: TeamScope; status?: RunStatus; sinceMs?: number; untilMs?: number }):
  Promise<{ runs: RunRecord[]; capped: boolean }> {
  const runs: RunRecord[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.listRuns({ ...filter, cursor, limit: Math.min(1_000, overviewLimits.runsMax - runs.length) });
    runs.push(...page.items);
    cursor = page.nextCursor ?? undefined;
    if (cursor !== undefined && runs.length >= overviewLimits.runsMax) return { runs, capped: true };
  } while (cursor !== undefined);
  return { runs, capped: false };
}

function fireLagOf(runs: readonly RunRecord[], nowMs: number): Overview['fireLag'] & { capped: boolean } {
  const lags: number[] = [];
  const byMinute = new Map<number, number[]>();
  for (const run of runs) {
    const lag = fireLagMs(run);
    if (lag === null || run.fireAtMs > nowMs) continue;
    lags.push(lag);
    const minute = Math.floor(run.fireAtMs / minuteMs) * minuteMs;
    const list = byMinute.get(minute);
    if (list === undefined) byMinute.set(minute, [lag]);
    else list.push(lag);
  }
  lags.sort((a, b) => a - b);
  const perMinute = [...byMinute.entries()].sort(([a], [b]) => a - b).map(([minute, values]) => {
    values.sort((a, b) => a - b);
    return { minuteMs: minute, count: values.length, p50Ms: percentile(values, 0.5)!, p99Ms: percentile(values, 0.99)! };
  });
  return { count: lags.length, p50Ms: percentile(lags, 0.5), p99Ms: percentile(lags, 0.99), perMinute, capped: false };
}

/**
 * Occurrences due per minute over the next hour, from the active jobs' schedules (a job's
 * pending fire time first, then its scheduled times): timers carry no team, jobs do.
 */
async function dueAheadOf(store: Store, team: TeamScope, nowMs: number): Promise<Overview['dueAhead']> {
  const startMs = Math.floor(nowMs / minuteMs) * minuteMs;
  const counts = new Array<number>(overviewLimits.minutesAhead).fill(0);
  const untilMs = startMs + overviewLimits.minutesAhead * minuteMs;
  const count = (atMs: number) => {
    const index = Math.floor((atMs - startMs) / minuteMs);
    if (index >= 0 && index < counts.length) counts[index]! += 1;
  };
  let cursor: string | undefined;
  let read = 0;
  do {
    const page = await store.listJobs({ team, state: 'active', cursor, limit: 1_000 });
    for (const job of page.items) {
      if (job.nextFireAtMs === null || job.nextScheduledAtMs === null || job.nextFireAtMs >= untilMs) continue;
      count(Math.max(job.nextFireAtMs, nowMs));
      if (!('cron' in job.spec.schedule)) continue;
      const schedule = compileSchedule(job.spec.schedule, job.spec.dst);
      // The pending fire is counted above (an overdue one in the current minute); then what follows it.
      const afterMs = Math.max(job.nextScheduledAtMs, nowMs);
      for (const occurrence of occurrencesAfter(schedule, afterMs, overviewLimits.minutesAhead * 60, untilMs)) {
        if (!occurrence.skippedDst) count(occurrence.scheduledAtMs);
      }
    }
    read += page.items.length;
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined && read < overviewLimits.jobsMax);
  return { perMinute: counts.map((value, index) => ({ minuteMs: startMs + index * minuteMs, count: value })), capped: cursor !== undefined };
}

export async function buildOverview(deps: { store: Store; metrics: Metrics; team: TeamScope; nowMs: number;
  silent: () => Promise<SilentJob[]>; }): Promise<Overview> {
  const { store, team, nowMs } = deps;
  const lastHour = await readRuns(store, { team, sinceMs: nowMs - hourMs, untilMs: nowMs + 1 });
  const backlogRuns = await Promise.all((['ready', 'running', 'retry_wait'] as const).map((status) => readRuns(store, { team, status })));
  const pools = new Map<string, { pool: string; ready: number; running: number; retryWait: number }>();
  const fields = ['ready', 'running', 'retryWait'] as const;
  backlogRuns.forEach(({ runs }, index) => {
    for (const run of runs) {
      let entry = pools.get(run.pool);
      if (entry === undefined) {
        entry = { pool: run.pool, ready: 0, running: 0, retryWait: 0 };
        pools.set(run.pool, entry);
      }
      entry[fields[index]!] += 1;
    }
  });
  const dead = await readRuns(store, { team, status: 'dead', sinceMs: nowMs - 24 * hourMs });
  const fireLag = fireLagOf(lastHour.runs, nowMs);
  const staleCount = async (labelled: { get(): Promise<{ values: { value: number; labels: Record<string, unknown> }[] }> },
    call?: string) => (await labelled.get()).values
    .filter((value) => call === undefined || value.labels['call'] === call)
    .reduce((sum, value) => sum + value.value, 0);
  return {
    nowMs,
    fireLag: { ...fireLag, capped: lastHour.capped },
    dueAhead: await dueAheadOf(store, team, nowMs),
    backlog: [...pools.values()].sort((a, b) => b.ready - a.ready || a.pool.localeCompare(b.pool)),
    backlogCapped: backlogRuns.some((read) => read.capped),
    failing: {
      deadLastDay: dead.runs.length, retryWait: backlogRuns[2]!.runs.length,
      latest: dead.runs.slice(0, overviewLimits.failingListed), capped: dead.capped,
    },
    silent: await deps.silent(),
    staleTokens: {
      heartbeat: await staleCount(deps.metrics.staleCompletionsTotal, 'heartbeat'),
      complete: await staleCount(deps.metrics.staleCompletionsTotal, 'complete'),
      dispatch: await staleCount(deps.metrics.dispatchRejectedStaleTokenTotal),
    },
  };
}
