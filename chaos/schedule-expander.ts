/**
 * The checker's view of schedules: the same pure functions the scheduler uses
 * (src/domain/schedule.ts), so "a time the schedule does not generate" means what it means
 * to the system. Always with `repeat: first`; the harness's jobs run in UTC.
 */
import { compileSchedule, occurrencesAfter } from '../src/domain/schedule.js';
import type { ScheduleExpander } from './jobs.js';

/** A chaos run is minutes long; a schedule firing more often than this per run is a harness bug. */
const occurrencesPerJobMax = 100_000;

export const expandSchedule: ScheduleExpander = (schedule, dstGap, afterMs, untilMs) => {
  const compiled = compileSchedule({ cron: schedule.cron, tz: schedule.tz }, { gap: dstGap, repeat: 'first' });
  // occurrencesAfter excludes its end; the checker's window includes it.
  return occurrencesAfter(compiled, afterMs, occurrencesPerJobMax, untilMs + 1);
};
