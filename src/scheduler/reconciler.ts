/**
 * The silent-miss guard (case study §4.3): on a period, every active recurring job without a
 * pending timer gets one back — the first occurrence after now — and is counted and logged.
 * Dispatch writes the next timer in the same transaction as the run, so a repair here means
 * a bug or a hand-edited database; `tickler_definitions_without_next_timer` should stay 0.
 * On PostgreSQL only the node that holds shard 0 runs it, so nodes do not repeat the work.
 */
import type { Clock, TimerHandle } from '../clock.js';
import { firstTimer } from '../domain/firing-plan.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { Store } from '../store/store.js';
import type { ScheduleCache } from './schedule-cache.js';

const repairBatchMax = 1_000;

export class Reconciler {
  private timer: TimerHandle | null = null;
  private stopped = false;

  constructor(
    private readonly deps: {
      store: Store;
      clock: Clock;
      metrics: Metrics;
      logger: Logger;
      schedules: ScheduleCache;
      intervalMs: number;
      isLeader(): boolean;
    },
  ) {}

  start(): void {
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
  }

  /** One pass; answers how many jobs were repaired. */
  async reconcileOnce(): Promise<number> {
    const { store, clock, metrics, logger, schedules } = this.deps;
    const missing = await store.findJobsWithoutTimer(repairBatchMax);
    metrics.definitionsWithoutNextTimer.set(missing.length);
    let repaired = 0;
    for (const job of missing) {
      const nowMs = clock.nowMs();
      const timer = firstTimer(job.jobId, job.spec, schedules.get(job.spec), nowMs);
      if (timer === null) continue;
      if (await store.repairJobTimer(job.jobId, job.version, timer, nowMs)) {
        repaired++;
        metrics.reconcilerRepairsTotal.inc();
        logger.warn({ jobId: job.jobId, team: job.team, nextFireAt: new Date(timer.fireAtMs).toISOString() },
          'active recurring job had no pending timer; repaired');
      }
    }
    return repaired;
  }

  private arm(): void {
    if (this.stopped) return;
    const { clock, intervalMs, logger } = this.deps;
    this.timer = clock.setTimer(clock.nowMs() + intervalMs, async () => {
      try {
        if (this.deps.isLeader()) await this.reconcileOnce();
      } catch (error) {
        logger.error({ err: error }, 'reconciler pass failed; the next pass retries');
      }
      this.arm();
    });
  }
}
