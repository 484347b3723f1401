/**
 * What to record when a job's pending timer fires (README, "Schedules in short": overlap,
 * catch-up, pause). Pure: the scheduler passes the timer and the time it fires at; the plan lists the
 * occurrences to write (ready or skipped, in scheduled order) and the job's next timer, which
 * the store writes in the same transaction (DESIGN.md invariant 3).
 *
 * Due occurrences are the timer's own plus every occurrence after it up to now. They are of
 * two kinds, told apart by `presentSinceMs`, the instant since which this scheduler has held
 * the job's shard without a break:
 * - late: due at or after it. The scheduler was there and only fell behind (a loaded
 *   machine, a create whose first timer reached the wheel after its time): every one fires,
 *   in order, one per dispatch (the next timer is the next late one, overdue).
 * - missed: due before it, while no scheduler held the shard (an outage, a failover). One
 *   missed occurrence is late, not missed: it fires. More than one follow `catch_up`:
 *   - latest: the newest fires, the others are skipped_outage;
 *   - none: all are skipped_outage;
 *   - all: only the earliest fires now and the next timer is the next missed one, overdue,
 *     so a backlog drains in order, one per dispatch, at the pace the scheduler throttles it to.
 *   The late ones after them then fire as above.
 * How a backlog fired in order meets the overlap policy is decided at dispatch (overlap.ts:
 * under `forbid` each waits for the one before it).
 * An occurrence older than catch_up_window_s is skipped_outage whatever its kind (the window
 * says how stale a run may be, whatever the reason it is late).
 * A backlog is counted, never walked: at most catchUpSkippedRowsMax skipped rows (the newest)
 * are written, the rest go into one summary.
 */
import type { JobSpec } from './types.js';
import type { OccurrenceWrite, TimerWrite } from './types.js';
import { catchUpSkippedRowsMax } from './limits.js';
import {
  countOccurrences, newestOccurrences, nextOccurrence, occurrencesAfter, type CompiledSchedule, type Occurrence,
} from './schedule.js';
import { jitterOffsetMs } from './jitter.js';

export interface FiringPlan {
  /** In scheduled order; status 'ready' | 'skipped_outage' | 'skipped_dst'. */
  occurrences: OccurrenceWrite[];
  summary?: { skippedCount: number; fromScheduledAtMs: number; toScheduledAtMs: number; reason: string };
  /** The job's next pending timer (null: one-shot done / schedule exhausted). */
  nextTimer: TimerWrite | null;
}

const dstSkipReason = 'the wall time does not exist on this day (DST gap) and dst.gap=skip';

function timerAt(scheduledAtMs: number, jitterMs: number): TimerWrite {
  return { scheduledAtMs, fireAtMs: scheduledAtMs + jitterMs };
}

/**
 * The first pending timer for a job created/patched/resumed at nowMs (first occurrence strictly after
 * nowMs; for once: at `at`, even if in the past: one-shots always fire). null if none. fireAtMs includes jitter.
 */
export function firstTimer(jobId: string, spec: JobSpec, schedule: CompiledSchedule, nowMs: number): TimerWrite | null {
  const jitterMs = jitterOffsetMs(jobId, spec.tolerance_s, schedule.minGapMs);
  if (schedule.kind === 'once') return schedule.atMs === null ? null : timerAt(schedule.atMs, jitterMs);
  const occurrence = nextOccurrence(schedule, nowMs);
  return occurrence === null ? null : timerAt(occurrence.scheduledAtMs, jitterMs);
}

/** The missed occurrences of a catch-up: the timer's own, then the schedule's up to now. */
class MissedOccurrences {
  private readonly own: Occurrence;

  constructor(private readonly schedule: CompiledSchedule, private readonly timerScheduledAtMs: number) {
    // The timer's occurrence counts even if the schedule no longer yields it (tz data changed).
    const streamed = occurrencesAfter(schedule, timerScheduledAtMs - 1, 1, timerScheduledAtMs + 1)[0];
    this.own = streamed ?? { scheduledAtMs: timerScheduledAtMs, skippedDst: false };
  }

  /** Missed occurrences with scheduledAt in [fromMs, untilMs] (inclusive, as "due" is). */
  count(fromMs: number, untilMs: number): number {
    const ownCounted = this.own.scheduledAtMs >= fromMs && this.own.scheduledAtMs <= untilMs ? 1 : 0;
    const afterMs = Math.max(fromMs - 1, this.timerScheduledAtMs);
    return ownCounted + countOccurrences(this.schedule, afterMs, untilMs + 1);
  }

  /** The newest `countMax` missed occurrences in [fromMs, untilMs], increasing. */
  newest(fromMs: number, untilMs: number, countMax: number): Occurrence[] {
    const afterMs = Math.max(fromMs - 1, this.timerScheduledAtMs);
    const newest = newestOccurrences(this.schedule, afterMs, untilMs + 1, countMax);
    const ownIncluded = this.own.scheduledAtMs >= fromMs && this.own.scheduledAtMs <= untilMs;
    if (ownIncluded && newest.length < countMax) newest.unshift(this.own);
    return newest;
  }

  /** The earliest missed occurrence in [fromMs, untilMs], or null. */
  earliest(fromMs: number, untilMs: number): Occurrence | null {
    if (this.own.scheduledAtMs >= fromMs && this.own.scheduledAtMs <= untilMs) return this.own;
    const afterMs = Math.max(fromMs - 1, this.timerScheduledAtMs);
    return occurrencesAfter(this.schedule, afterMs, 1, untilMs + 1)[0] ?? null;
  }

  get first(): Occurrence {
    return this.own;
  }
}

interface PlanContext {
  readonly spec: JobSpec;
  readonly schedule: CompiledSchedule;
  readonly timer: { scheduledAtMs: number; fireAtMs: number };
  readonly nowMs: number;
  readonly jitterMs: number;
  /** Occurrences scheduled before this are older than catch_up_window_s. */
  readonly windowStartMs: number;
  readonly missed: MissedOccurrences;
  /** The last instant of the missed part: occurrences after it are late, not missed. */
  readonly missedUntilMs: number;
}

function fireAtOf(context: PlanContext, scheduledAtMs: number): number {
  return scheduledAtMs === context.timer.scheduledAtMs ? context.timer.fireAtMs : scheduledAtMs + context.jitterMs;
}

function skippedWrite(context: PlanContext, occurrence: Occurrence): OccurrenceWrite {
  const fireAtMs = fireAtOf(context, occurrence.scheduledAtMs);
  if (occurrence.skippedDst) return { scheduledAtMs: occurrence.scheduledAtMs, fireAtMs, status: 'skipped_dst', reason: dstSkipReason };
  const reason = occurrence.scheduledAtMs < context.windowStartMs
    ? `older than catch_up_window_s=${context.spec.catch_up_window_s} when the scheduler reached it`
    : `missed while the scheduler was down; catch_up=${context.spec.catch_up}`;
  return { scheduledAtMs: occurrence.scheduledAtMs, fireAtMs, status: 'skipped_outage', reason };
}

/** A fireable occurrence is written ready; a DST-skipped or stale one is written skipped. */
function dueWrite(context: PlanContext, occurrence: Occurrence): OccurrenceWrite {
  if (occurrence.skippedDst || occurrence.scheduledAtMs < context.windowStartMs) return skippedWrite(context, occurrence);
  return { scheduledAtMs: occurrence.scheduledAtMs, fireAtMs: fireAtOf(context, occurrence.scheduledAtMs), status: 'ready' };
}

function nextTimerAfter(context: PlanContext, afterMs: number): TimerWrite | null {
  const occurrence = nextOccurrence(context.schedule, afterMs);
  return occurrence === null ? null : timerAt(occurrence.scheduledAtMs, context.jitterMs);
}

/**
 * Skipped rows for `skipped` (the newest of `totalCount` skipped occurrences, increasing),
 * keeping the newest catchUpSkippedRowsMax and summarising the rest.
 */
function boundedSkips(context: PlanContext, skipped: Occurrence[], totalCount: number): Pick<FiringPlan, 'occurrences' | 'summary'> {
  const rows = skipped.slice(-catchUpSkippedRowsMax);
  const unwrittenCount = totalCount - rows.length;
  if (unwrittenCount <= 0) return { occurrences: rows.map((occurrence) => skippedWrite(context, occurrence)) };
  const newestUnwritten = skipped[skipped.length - rows.length - 1] ?? context.missed.first;
  return {
    occurrences: rows.map((occurrence) => skippedWrite(context, occurrence)),
    summary: {
      skippedCount: unwrittenCount,
      fromScheduledAtMs: context.missed.first.scheduledAtMs,
      toScheduledAtMs: newestUnwritten.scheduledAtMs,
      reason: `${unwrittenCount} more missed occurrences skipped without a row each; catch_up=${context.spec.catch_up}`,
    },
  };
}

/** catch_up latest or none: one fire at most (the newest fresh occurrence), the rest skipped. */
function planLatestOrNone(context: PlanContext, missedCount: number): FiringPlan {
  const newest = context.missed.newest(-Infinity, context.missedUntilMs, catchUpSkippedRowsMax + 2);
  let firedIndex = -1;
  if (context.spec.catch_up === 'latest') {
    firedIndex = newest.findLastIndex((occurrence) => !occurrence.skippedDst && occurrence.scheduledAtMs >= context.windowStartMs);
  }
  const fired = newest[firedIndex];
  const skipped = newest.filter((_occurrence, index) => index !== firedIndex);
  const { occurrences, summary } = boundedSkips(context, skipped, missedCount - (fired === undefined ? 0 : 1));
  if (fired !== undefined) occurrences.push(dueWrite(context, fired));
  occurrences.sort((left, right) => left.scheduledAtMs - right.scheduledAtMs);
  // The next timer is the first late occurrence (overdue) when there is one, else the next to come.
  return { occurrences, ...(summary === undefined ? {} : { summary }), nextTimer: nextTimerAfter(context, context.missedUntilMs) };
}

/**
 * In order: stale ones skipped, the earliest fresh one fires, the next timer is the next due
 * one (overdue). catch_up all, and every late occurrence, drains this way.
 */
function planAll(context: PlanContext): FiringPlan {
  const staleUntilMs = context.windowStartMs - 1;
  const staleCount = context.missed.count(-Infinity, staleUntilMs);
  const stale = staleCount === 0 ? [] : context.missed.newest(-Infinity, staleUntilMs, catchUpSkippedRowsMax + 1);
  const { occurrences, summary } = boundedSkips(context, stale, staleCount);
  const earliestFresh = context.missed.earliest(context.windowStartMs, context.nowMs);
  if (earliestFresh !== null) occurrences.push(dueWrite(context, earliestFresh));
  const nextTimer = nextTimerAfter(context, earliestFresh?.scheduledAtMs ?? context.nowMs);
  return { occurrences, ...(summary === undefined ? {} : { summary }), nextTimer };
}

/**
 * What to record when the pending timer {scheduledAtMs, fireAtMs} of a job is fired at nowMs.
 * `presentSinceMs`: since when the firing scheduler has held the job's shard without a break
 * (occurrences due from then on are late, not missed by an outage).
 */
export function planFiring(jobId: string, spec: JobSpec, schedule: CompiledSchedule,
  timer: { scheduledAtMs: number; fireAtMs: number }, nowMs: number, presentSinceMs: number): FiringPlan {
  if (schedule.kind === 'once') {
    return { occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }], nextTimer: null };
  }
  const context: PlanContext = {
    spec, schedule, timer, nowMs,
    jitterMs: jitterOffsetMs(jobId, spec.tolerance_s, schedule.minGapMs),
    windowStartMs: nowMs - spec.catch_up_window_s * 1_000,
    missed: new MissedOccurrences(schedule, timer.scheduledAtMs),
    missedUntilMs: Math.min(Math.max(nowMs, timer.scheduledAtMs), presentSinceMs - 1),
  };
  // A timer fired early (it should not be) still plans from its own occurrence, never before it.
  const horizonMs = Math.max(nowMs, timer.scheduledAtMs);
  const dueCount = context.missed.count(-Infinity, horizonMs);
  if (dueCount <= 1) {
    return { occurrences: [dueWrite(context, context.missed.first)], nextTimer: nextTimerAfter(context, horizonMs) };
  }
  const missedCount = context.missed.count(-Infinity, context.missedUntilMs);
  // Late ones (none missed), a lone missed one before late ones, or catch_up all: in order.
  if (missedCount <= 1 || spec.catch_up === 'all') return planAll(context);
  return planLatestOrNone(context, missedCount);
}
