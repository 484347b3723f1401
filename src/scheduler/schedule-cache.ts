/**
 * Compiled schedules, cached by what defines them. Compiling a cron expression and finding
 * its smallest gap costs far more than a dispatch, and a herd of 100,000 jobs on `0 0 * * *`
 * shares one compiled schedule. Bounded: the oldest entry leaves when the cache is full.
 */
import { compileSchedule, type CompiledSchedule } from '../domain/schedule.js';
import type { JobSpec } from '../domain/types.js';

const cacheEntriesMax = 10_000;

export class ScheduleCache {
  private readonly entries = new Map<string, CompiledSchedule>();

  /** Compiles the job's schedule; throws what compileSchedule throws (a stored job never should). */
  get(spec: JobSpec): CompiledSchedule {
    const schedule = spec.schedule;
    const cacheKey = 'cron' in schedule
      ? `c|${schedule.cron}|${schedule.tz}|${spec.dst.gap}|${spec.dst.repeat}`
      : `o|${schedule.at}`;
    const cached = this.entries.get(cacheKey);
    if (cached !== undefined) return cached;
    const compiled = compileSchedule(schedule, spec.dst);
    if (this.entries.size >= cacheEntriesMax) {
      const oldestKey = this.entries.keys().next().value;
      if (oldestKey !== undefined) this.entries.delete(oldestKey);
    }
    this.entries.set(cacheKey, compiled);
    return compiled;
  }
}
