/**
 * What the simulation's clients were told, as the checks need it: each job's lifetime as
 * intervals during which its schedule was owed (from an acknowledged create, patch or resume
 * to an acknowledged patch, pause or cancel), the windows in which it was paused or
 * cancelled, and how far each interval's occurrences have been checked.
 */
import { compileSchedule, occurrencesAfter, type CompiledSchedule } from '../src/domain/schedule.js';
import type { JobSpec } from '../src/domain/types.js';

export interface OwedInterval {
  fromMs: number;
  /** Infinity while open. */
  toMs: number;
  spec: JobSpec;
  /** Occurrences up to here (scheduled time) have been listed by `owedOccurrences` already. */
  listedUntilMs: number;
  compiled: CompiledSchedule | null;
}

export interface SimJob {
  name: string;
  jobId: string;
  recurring: boolean;
  state: 'active' | 'paused' | 'cancelled' | 'done';
  intervals: OwedInterval[];
  /** Sequence numbers (Recorder.seq) after which the job must fire nothing, until `untilSeq` (Infinity: still so). */
  quiet: { kind: 'paused' | 'cancelled'; afterSeq: number; untilSeq: number }[];
}

/** Compiling a cron with a seconds field takes milliseconds; a seed compiles the same few again and again. */
const compiledSchedules = new Map<string, CompiledSchedule>();

function compiled(spec: JobSpec): CompiledSchedule {
  const key = JSON.stringify([spec.schedule, spec.dst]);
  let schedule = compiledSchedules.get(key);
  if (schedule === undefined) {
    schedule = compileSchedule(spec.schedule, spec.dst);
    compiledSchedules.set(key, schedule);
  }
  return schedule;
}

export function openInterval(job: SimJob, fromMs: number, spec: JobSpec): void {
  job.intervals.push({ fromMs, toMs: Infinity, spec, listedUntilMs: fromMs, compiled: null });
}

export function closeInterval(job: SimJob, atMs: number): void {
  const last = job.intervals.at(-1);
  if (last !== undefined && last.toMs === Infinity) last.toMs = atMs;
}

/**
 * Scheduled times an interval has come to owe since the last call, by `nowMs`: those whose
 * latest fire time (with jitter) plus `boundMs` had passed before the interval closed. A cron
 * job owes the occurrences strictly after the interval's start (firstTimer's rule); a
 * one-shot owes its time wherever it lies, since one-shots always fire.
 */
export function newlyOwedOccurrences(interval: OwedInterval, boundMs: number, nowMs: number): number[] {
  const untilMs = Math.min(interval.toMs, nowMs) - boundMs - interval.spec.tolerance_s * 1000;
  if (interval.listedUntilMs === Infinity) return [];
  interval.compiled ??= compiled(interval.spec);
  const schedule = interval.compiled;
  if (schedule.kind === 'once') {
    if (schedule.atMs === null || schedule.atMs > untilMs) return [];
    interval.listedUntilMs = Infinity;
    return [schedule.atMs];
  }
  if (untilMs <= interval.listedUntilMs) return [];
  const owed = occurrencesAfter(schedule, interval.listedUntilMs, 10_000, untilMs + 1).map((occurrence) => occurrence.scheduledAtMs);
  interval.listedUntilMs = untilMs;
  return owed;
}
