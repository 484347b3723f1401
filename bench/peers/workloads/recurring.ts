/**
 * Recurring jobs (W6): 1,000 jobs every second where the system allows it (tickler, BullMQ),
 * every minute otherwise (graphile-worker and pg-boss only schedule by the minute), over
 * three minutes. Every occurrence due inside the window must start exactly once; lag is
 * handler start − the occurrence's scheduled time.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { LatencyRecorder } from '../../latency.js';
import { figure } from '../results.js';
import { wallClock } from '../services.js';
import type { HandlerStart } from '../types.js';
import { countOf, lagFigures, type Workload, type WorkloadContext, type WorkloadOutcome } from './common.js';

/** The first occurrence counted is at least this far after the workers started. */
const windowLeadMs = 5_000;

export const recurringWorkload: Workload = {
  id: 'W6',
  title: 'recurring',
  description: '1,000 recurring jobs, every second where the system allows it (else every minute), for 3 minutes; ' +
    'an occurrence is missed when no handler started it within 5 s (every second) or 30 s (every minute) of its time; ' +
    'lag against the scheduled time',
  headlineKey: 'lag_p99',
  run: async (context: WorkloadContext): Promise<WorkloadOutcome> => {
    const { adapter, quick, progress } = context;
    const period = adapter.supportsEverySecond ? 'second' : 'minute';
    if (quick && period === 'minute') throw new Error('W6 has no quick form for minute-granular systems (it takes minutes)');
    const periodMs = period === 'second' ? 1_000 : 60_000;
    const count = countOf(context, 5, 1_000);
    const durationMs = quick ? 3_000 : 180_000;
    const graceMs = period === 'second' ? 5_000 : 30_000;
    const seen = new Map<string, number>();
    const lag = new LatencyRecorder();
    let windowStartMs = Number.POSITIVE_INFINITY;
    let windowEndMs = Number.NEGATIVE_INFINITY;
    let offGridCount = 0;
    const keys = new Set<string>();
    const onStart: HandlerStart = ({ dueAtMs, handledAtMs, recurringKey }) => {
      const key = recurringKey ?? 'unknown';
      keys.add(key);
      if (dueAtMs % periodMs !== 0) offGridCount += 1;
      if (dueAtMs < windowStartMs || dueAtMs >= windowEndMs) return;
      const occurrence = `${key}@${dueAtMs}`;
      const starts = (seen.get(occurrence) ?? 0) + 1;
      seen.set(occurrence, starts);
      if (starts === 1) lag.record(handledAtMs - dueAtMs);
    };
    progress.phase('creating');
    await adapter.createRecurring({ count, period });
    await adapter.startWorkers(onStart);
    windowStartMs = Math.ceil((wallClock.nowMs() + windowLeadMs) / periodMs) * periodMs;
    windowEndMs = windowStartMs + durationMs;
    const occurrenceCount = durationMs / periodMs;
    progress.phase('running', () => `occurrences started ${seen.size}/${occurrenceCount * count}, jobs seen ${keys.size}`);
    await delay(windowEndMs - periodMs + graceMs - wallClock.nowMs());
    progress.done();
    await adapter.stopWorkers();
    let duplicates = 0;
    for (const starts of seen.values()) duplicates += starts - 1;
    const notes = [`every ${period}; ${occurrenceCount} occurrences per job in the window`];
    if (keys.size !== count) notes.push(`${keys.size} distinct jobs fired, ${count} were created`);
    if (offGridCount > 0) notes.push(`${offGridCount} starts carried a scheduled time off the ${period} grid`);
    return {
      figures: [
        figure('period_s', 'period', periodMs / 1_000, 's', 'lower'),
        ...lagFigures(lag.summary()),
        figure('missed', 'missed occurrences', occurrenceCount * count - seen.size, 'count', 'zero'),
        figure('duplicates', 'duplicate starts', duplicates, 'count', 'zero'),
      ],
      notes,
    };
  },
};
