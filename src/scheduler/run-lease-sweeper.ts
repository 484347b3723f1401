/**
 * Worker-lease expiry (DESIGN.md flow 7): runs whose worker stopped heartbeating are
 * re-offered as a new attempt, sent to the DLQ when out of attempts, or — for `unsafe` jobs
 * — abandoned. The sweeper wakes at the earliest lease expiry the store knows, at a deadline
 * the server notes when it grants a lease, and at least every `intervalMs` for leases granted
 * by other processes. It never arms for an instant already past, so an idle server with runs
 * waiting (ready or retry_wait, which need no sweep) does not wake at all.
 */
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { Store } from '../store/store.js';

const expireBatchMax = 1_000;
/** How soon to look again at a lease that was due yet not expired by a sweep. */
const sweepRetryDelayMs = 1_000;

export class RunLeaseSweeper {
  private timer: TimerHandle | null = null;
  private timerAtMs = Infinity;
  private stopped = false;
  private sweeping: Promise<void> | null = null;

  constructor(
    private readonly deps: { store: Store; clock: Clock; metrics: Metrics; logger: Logger; intervalMs: number },
  ) {}

  /** Sweeps once now and arms for what comes next; resolves when that first sweep is done. */
  start(): Promise<void> {
    return this.sweep();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
  }

  noteDeadline(atMs: number): void {
    this.armAt(atMs);
  }

  private armAt(atMs: number): void {
    if (this.stopped || atMs >= this.timerAtMs) return;
    this.timer?.cancel();
    this.timerAtMs = atMs;
    this.timer = this.deps.clock.setTimer(atMs, () => this.sweep());
  }

  private sweep(): Promise<void> {
    this.timer = null;
    this.timerAtMs = Infinity;
    if (this.sweeping !== null) return this.sweeping;
    this.sweeping = this.sweepOnce().finally(() => {
      this.sweeping = null;
    });
    return this.sweeping;
  }

  private async sweepOnce(): Promise<void> {
    const { store, clock, metrics, logger, intervalMs } = this.deps;
    try {
      for (;;) {
        const expired = await store.expireRunLeases(clock.nowMs(), expireBatchMax);
        for (const run of expired) {
          metrics.workerLeaseExpiriesTotal.inc({ outcome: run.toStatus });
          if (run.toStatus === 'dead') logger.warn({ runId: run.runId, pool: run.pool }, 'run is dead: its lease ran out with no attempts left');
        }
        if (expired.length > 0) logger.info({ runs: expired.length }, 'worker leases expired');
        if (expired.length < expireBatchMax) break;
      }
      const nowMs = clock.nowMs();
      let nextExpiryMs = await store.nextLeaseExpiryMs() ?? Infinity;
      // The sweep just expired everything due by nowMs; an expiry still at or before it is a
      // lease the sweep could not take (another node holds its row). Re-arming at a past
      // instant would spin, on the virtual clock without end: look again a little later.
      if (nextExpiryMs <= nowMs) nextExpiryMs = nowMs + sweepRetryDelayMs;
      const fallbackMs = clock.isVirtual ? Infinity : nowMs + intervalMs;
      this.armAt(Math.min(nextExpiryMs, fallbackMs));
    } catch (error) {
      logger.error({ err: error }, 'lease sweep failed; retrying');
      this.armAt(clock.nowMs() + intervalMs);
    }
  }
}
