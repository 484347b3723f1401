/**
 * `tickler verify`: the occurrences a job's schedule calls for in a window, against its runs
 * in the ledger, and (during a dual run) against what the old host's cron log says it ran.
 * Pure: the caller fetches jobs and runs.
 *
 * An occurrence is *missing* when no run has its scheduled time, or its run did not run
 * (`skipped_*`, `cancelled`, `dead`, `abandoned`); *late* when its run started more than the
 * job's `tolerance_s` after its scheduled time; a run with a scheduled time the schedule does
 * not call for (a trigger, a schedule changed since) is *extra*. A paused job's occurrences
 * while paused count as missing: verify compares with the schedule, not with the pause. A
 * cancelled job is compared up to its cancel (`updated_at`); every job from its creation.
 */
import { compileSchedule, occurrencesAfter } from '../domain/schedule.js';
import type { Job, Run } from '../worker/wire.js';

export interface Finding {
  kind: 'missing' | 'late' | 'extra' | 'pending' | 'cron_only';
  key: string;
  at: string;
  detail: string;
}

const notRun = new Set(['skipped_overlap', 'skipped_outage', 'skipped_dst', 'cancelled', 'dead', 'abandoned']);
const inProgress = new Set(['ready', 'running', 'retry_wait']);
const occurrencesMax = 100_000;

export function expectedOccurrences(job: Job, sinceMs: number, untilMs: number): number[] {
  const fromMs = Math.max(sinceMs - 1, Date.parse(job.created_at));
  const endMs = job.state === 'cancelled' ? Math.min(untilMs, Date.parse(job.updated_at)) : untilMs;
  if (!(endMs > fromMs)) return [];
  const schedule = compileSchedule(job.schedule as never, job.dst);
  return occurrencesAfter(schedule, fromMs, occurrencesMax, endMs)
    .filter((occurrence) => !occurrence.skippedDst)
    .map((occurrence) => occurrence.scheduledAtMs);
}

export function compareJob(job: Job, runs: readonly Run[], sinceMs: number, untilMs: number): Finding[] {
  const key = job.key ?? job.job_id;
  const findings: Finding[] = [];
  const bySchedule = new Map<number, Run>();
  for (const run of runs) bySchedule.set(Date.parse(run.scheduled_at), run);
  const expected = new Set(expectedOccurrences(job, sinceMs, untilMs));
  for (const scheduledAtMs of expected) {
    const at = new Date(scheduledAtMs).toISOString();
    const run = bySchedule.get(scheduledAtMs);
    if (run === undefined) {
      findings.push({ kind: 'missing', key, at, detail: 'no run in the ledger' });
    } else if (notRun.has(run.status)) {
      findings.push({ kind: 'missing', key, at, detail: `run ${run.run_id} is ${run.status}${run.last_error === null ? '' : `: ${run.last_error}`}` });
    } else if (inProgress.has(run.status) && run.started_at === null) {
      findings.push({ kind: 'pending', key, at, detail: `run ${run.run_id} is ${run.status}` });
    } else if (run.started_at !== null) {
      const lateS = (Date.parse(run.started_at) - scheduledAtMs) / 1000;
      if (lateS > job.tolerance_s) findings.push({ kind: 'late', key, at, detail: `started ${lateS.toFixed(1)} s after, over tolerance_s ${job.tolerance_s}` });
    }
  }
  for (const [scheduledAtMs, run] of bySchedule) {
    if (!expected.has(scheduledAtMs) && scheduledAtMs >= sinceMs && scheduledAtMs < untilMs) {
      findings.push({ kind: 'extra', key, at: run.scheduled_at, detail: `run ${run.run_id} (${run.status}) is not an occurrence of the schedule` });
    }
  }
  return findings;
}

/** One `CMD` line of cron's syslog: who ran what, when (epoch ms, to the second). */
export interface CronLogEntry {
  atMs: number;
  user: string;
  command: string;
  line: number;
}

const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
// "Dec  7 03:17:01 web-1 CRON[1234]: (root) CMD (command)" (Debian) or CROND (RHEL/cronie);
// or with an RFC 3339 stamp first (rsyslog's high-precision format, journalctl -o short-iso).
const syslogLine = /^(?:([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})|(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})))\s+\S+\s+(?:\/usr\/sbin\/)?CROND?\[\d+\]:\s+\((\S+)\)\s+CMD\s+\((.*)\)\s*$/;

/**
 * Parses cron's CMD lines. Classic syslog stamps carry no year or zone: they are read as
 * wall time in `tz` (the old host's zone), in the year of `sinceMs` (the next year for a
 * month before the window's).
 */
export function parseCronLog(text: string, tz: string, sinceMs: number, toInstant: (wallMs: number, tz: string) => number): CronLogEntry[] {
  const entries: CronLogEntry[] = [];
  const sinceDate = new Date(sinceMs);
  text.split(/\r?\n/).forEach((raw, index) => {
    const match = syslogLine.exec(raw);
    if (match === null) return;
    let atMs: number;
    if (match[6] !== undefined) {
      atMs = Date.parse(match[6].replace(/([+-]\d{2})(\d{2})$/, '$1:$2'));
    } else {
      const month = months.indexOf(match[1]!);
      const year = sinceDate.getUTCFullYear() + (month < sinceDate.getUTCMonth() ? 1 : 0);
      atMs = toInstant(Date.UTC(year, month, Number(match[2]), Number(match[3]), Number(match[4]), Number(match[5])), tz);
    }
    entries.push({ atMs, user: match[7]!, command: match[8]!.trim(), line: index + 1 });
  });
  return entries;
}

/** Whether a logged command is this job's (cron logs the command up to its first `%`). */
function sameCommand(job: Job, user: string, command: string): boolean {
  const payload = job.payload as { exec?: { command?: unknown }; source?: { user?: unknown } } | null;
  const own = payload?.exec?.command;
  if (typeof own !== 'string') return false;
  if (payload?.source?.user !== undefined && payload.source.user !== user) return false;
  const logged = command.split(/(?<!\\)%/)[0]!.replace(/\\%/g, '%').trim();
  return logged === own.trim();
}

/**
 * What old cron ran in the window that tickler did not: a logged command whose job has no
 * run scheduled in the same minute, or one no job carries.
 */
export function compareCronLog(entries: readonly CronLogEntry[], jobs: readonly { job: Job; runs: readonly Run[] }[],
  sinceMs: number, untilMs: number): Finding[] {
  const findings: Finding[] = [];
  for (const entry of entries) {
    if (entry.atMs < sinceMs || entry.atMs >= untilMs) continue;
    const at = new Date(entry.atMs).toISOString();
    const owners = jobs.filter(({ job }) => sameCommand(job, entry.user, entry.command));
    if (owners.length === 0) {
      findings.push({ kind: 'cron_only', key: `(${entry.user}) ${entry.command}`, at, detail: `log line ${entry.line}: no job runs this command` });
      continue;
    }
    const minuteMs = entry.atMs - (entry.atMs % 60_000);
    const ran = owners.some(({ runs }) => runs.some((run) => {
      const scheduledMs = Date.parse(run.scheduled_at);
      return scheduledMs >= minuteMs && scheduledMs < minuteMs + 60_000 && !notRun.has(run.status);
    }));
    if (!ran) {
      findings.push({ kind: 'cron_only', key: owners[0]!.job.key ?? owners[0]!.job.job_id, at, detail: `log line ${entry.line}: old cron ran it, tickler did not` });
    }
  }
  return findings;
}
