/**
 * "Did it run last night?": every occurrence due in a window and what became of it, per job.
 * A recurring job's expected occurrences come from its schedule, so an occurrence with no
 * run row at all (the scheduler was down past its catch-up, the timer was lost) shows as
 * `missed` instead of being absent; run rows come from the ledger. One-shot jobs' runs are
 * grouped by pool, so a herd of timers cannot crowd the nightly job out of the answer.
 * Everything is bounded: runs read, jobs looked up and occurrences listed per row.
 */
import { compileSchedule, occurrencesAfter } from '../domain/schedule.js';
import type { JobRecord, RunRecord, RunStatus } from '../domain/types.js';
import type { Store, TeamScope } from '../store/store.js';

export const occurrenceLimits = {
  /** Runs read from the ledger for one window. */
  runsMax: 20_000,
  /** Active and paused jobs read for their schedules. */
  jobsMax: 2_000,
  /** Jobs of runs outside that list (cancelled, done, one-shot) looked up one by one. */
  lookupsMax: 500,
  /** Occurrences listed in one row; the counts still cover them all. */
  perRowMax: 1_500,
  /** Rows answered. */
  rowsMax: 500,
};

export type OccurrenceStatus = RunStatus | 'missed' | 'pending' | 'paused';

export interface Occurrence {
  scheduledAtMs: number;
  status: OccurrenceStatus;
  /** From the job's schedule; false for a trigger or a run the schedule no longer explains. */
  expected: boolean;
  late: boolean;
  run: RunRecord | null;
}

export interface OccurrenceRow {
  job: JobRecord | null;
  /** One-shot runs are grouped by their pool; null for a recurring job's row. */
  pool: string;
  counts: Partial<Record<OccurrenceStatus, number>>;
  missed: number;
  failed: number;
  late: number;
  total: number;
  occurrences: Occurrence[];
  truncated: boolean;
}

export interface OccurrenceQuery {
  team: TeamScope;
  sinceMs: number;
  untilMs: number;
  nowMs: number;
  jobId?: string;
  keyPrefix?: string;
  pool?: string;
  /** Fire lag (dispatch after fire time) above which an occurrence is late. */
  lateAfterMs: number;
}

export interface OccurrenceWindow {
  rows: OccurrenceRow[];
  /** Some input was cut at a bound: the answer is partial. */
  truncated: boolean;
}

const failedStatuses: readonly OccurrenceStatus[] = ['dead', 'abandoned'];

export function fireLagMs(run: RunRecord): number | null {
  return run.dispatchedAtMs === null ? null : Math.max(0, run.dispatchedAtMs - run.fireAtMs);
}

/** How long past its scheduled time an occurrence with no run counts as missed rather than pending. */
function graceMs(job: JobRecord, lateAfterMs: number): number {
  return job.spec.tolerance_s * 1000 + lateAfterMs;
}

export async function occurrencesInWindow(store: Store, query: OccurrenceQuery): Promise<OccurrenceWindow> {
  let truncated = false;
  const runs: RunRecord[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.listRuns({
      team: query.team, jobId: query.jobId, pool: query.pool, sinceMs: query.sinceMs, untilMs: query.untilMs,
      cursor, limit: Math.min(1_000, occurrenceLimits.runsMax - runs.length),
    });
    runs.push(...page.items);
    cursor = page.nextCursor ?? undefined;
    if (cursor !== undefined && runs.length >= occurrenceLimits.runsMax) {
      truncated = true;
      break;
    }
  } while (cursor !== undefined);

  const jobs = new Map<string, JobRecord>();
  if (query.jobId !== undefined) {
    const job = await store.getJob(query.team, query.jobId);
    if (job !== null) jobs.set(job.jobId, job);
  } else {
    for (const state of ['active', 'paused'] as const) {
      truncated = await readJobs(store, query, state, jobs) || truncated;
    }
  }
  const unknownIds = [...new Set(runs.map((run) => run.jobId))].filter((id) => !jobs.has(id));
  if (unknownIds.length > occurrenceLimits.lookupsMax) truncated = true;
  for (const jobId of unknownIds.slice(0, occurrenceLimits.lookupsMax)) {
    const job = await store.getJob(query.team, jobId);
    if (job !== null) jobs.set(jobId, job);
  }

  const rows = new Map<string, { job: JobRecord | null; pool: string; occurrences: Occurrence[] }>();
  const rowOf = (job: JobRecord | null, pool: string) => {
    const id = job !== null && 'cron' in job.spec.schedule ? `job:${job.jobId}` : `pool:${pool}`;
    let row = rows.get(id);
    if (row === undefined) {
      row = { job: id.startsWith('job:') ? job : null, pool, occurrences: [] };
      rows.set(id, row);
    }
    return row;
  };
  const matches = (job: JobRecord | undefined, pool: string): boolean =>
    (query.pool === undefined || pool === query.pool)
    && (query.keyPrefix === undefined || (job?.spec.key ?? '').startsWith(query.keyPrefix));

  const runsByJobTime = new Map<string, RunRecord[]>();
  for (const run of runs) {
    const key = `${run.jobId} ${run.scheduledAtMs}`;
    const list = runsByJobTime.get(key);
    if (list === undefined) runsByJobTime.set(key, [run]);
    else list.push(run);
  }

  const expectedTimes = new Map<string, Set<number>>();
  for (const job of jobs.values()) {
    if (!('cron' in job.spec.schedule) || !matches(job, job.spec.pool)) continue;
    const row = rowOf(job, job.spec.pool);
    const times = new Set<number>();
    expectedTimes.set(job.jobId, times);
    const schedule = compileSchedule(job.spec.schedule, job.spec.dst);
    const fromMs = Math.max(query.sinceMs - 1, job.createdAtMs);
    const endMs = Math.min(query.untilMs, job.state === 'cancelled' || job.state === 'done' ? job.updatedAtMs : query.untilMs);
    for (const occurrence of occurrencesAfter(schedule, fromMs, occurrenceLimits.runsMax, endMs)) {
      times.add(occurrence.scheduledAtMs);
      if ((runsByJobTime.get(`${job.jobId} ${occurrence.scheduledAtMs}`)?.length ?? 0) > 0) continue;
      let status: OccurrenceStatus = 'missed';
      if (occurrence.scheduledAtMs + graceMs(job, query.lateAfterMs) > query.nowMs) status = 'pending';
      else if (job.state === 'paused' && occurrence.scheduledAtMs >= job.updatedAtMs) status = 'paused';
      row.occurrences.push({ scheduledAtMs: occurrence.scheduledAtMs, status, expected: true, late: false, run: null });
    }
  }
  for (const run of runs) {
    const job = jobs.get(run.jobId);
    if (!matches(job, run.pool)) continue;
    const row = rowOf(job ?? null, run.pool);
    const lag = fireLagMs(run);
    const times = expectedTimes.get(run.jobId);
    const expected = times === undefined || times.has(run.scheduledAtMs);
    row.occurrences.push({
      scheduledAtMs: run.scheduledAtMs, status: run.status, expected, run,
      late: lag !== null && lag > query.lateAfterMs,
    });
  }
  const ranked = rankRows([...rows.values()].map(summarise));
  return { rows: ranked.slice(0, occurrenceLimits.rowsMax), truncated: truncated || ranked.length > occurrenceLimits.rowsMax };
}

async function readJobs(store: Store, query: OccurrenceQuery, state: 'active' | 'paused', into: Map<string, JobRecord>): Promise<boolean> {
  let cursor: string | undefined;
  let read = 0;
  do {
    const page = await store.listJobs({ team: query.team, state, pool: query.pool, keyPrefix: query.keyPrefix, cursor, limit: 1_000 });
    for (const job of page.items) into.set(job.jobId, job);
    read += page.items.length;
    cursor = page.nextCursor ?? undefined;
    if (cursor !== undefined && read >= occurrenceLimits.jobsMax) return true;
  } while (cursor !== undefined);
  return false;
}

function summarise(row: { job: JobRecord | null; pool: string; occurrences: Occurrence[] }): OccurrenceRow {
  const counts: Partial<Record<OccurrenceStatus, number>> = {};
  let missed = 0;
  let failed = 0;
  let late = 0;
  for (const occurrence of row.occurrences) {
    counts[occurrence.status] = (counts[occurrence.status] ?? 0) + 1;
    if (occurrence.status === 'missed') missed++;
    if (failedStatuses.includes(occurrence.status)) failed++;
    if (occurrence.late) late++;
  }
  // Newest first, as the ledger lists; the problems of a long row are kept when it is cut.
  const sorted = row.occurrences.sort((a, b) => b.scheduledAtMs - a.scheduledAtMs);
  const shown = sorted.length <= occurrenceLimits.perRowMax ? sorted : keepProblems(sorted);
  return { job: row.job, pool: row.pool, counts, missed, failed, late, total: sorted.length, occurrences: shown,
    truncated: shown.length < sorted.length };
}

function isProblem(occurrence: Occurrence): boolean {
  return occurrence.status === 'missed' || occurrence.late || failedStatuses.includes(occurrence.status);
}

function keepProblems(sorted: Occurrence[]): Occurrence[] {
  const problems = sorted.filter(isProblem).slice(0, occurrenceLimits.perRowMax);
  const rest = sorted.filter((occurrence) => !isProblem(occurrence)).slice(0, occurrenceLimits.perRowMax - problems.length);
  return [...problems, ...rest].sort((a, b) => b.scheduledAtMs - a.scheduledAtMs);
}

/** Missed first, then failed, then late, then skipped, then the rest; by key (or pool) within each. */
function rankRows(rows: OccurrenceRow[]): OccurrenceRow[] {
  const skipped = (row: OccurrenceRow) => Object.keys(row.counts).some((status) => status.startsWith('skipped_'));
  const rank = (row: OccurrenceRow) => (row.missed > 0 ? 0 : row.failed > 0 ? 1 : row.late > 0 ? 2 : skipped(row) ? 3 : 4);
  const name = (row: OccurrenceRow) => row.job?.spec.key ?? row.job?.jobId ?? `~${row.pool}`;
  return rows.sort((a, b) => rank(a) - rank(b) || name(a).localeCompare(name(b)));
}
