/**
 * The loader (DESIGN.md flow 4): every refresh it reads the next `loadHorizonMs` of the node's
 * shards into the wheel, page by page, payloads dropped, so memory is bounded by the window,
 * never by the number of pending timers. Near timers the store announces (created or changed
 * inside the window) go straight in.
 */
import type { Clock, TimerHandle } from '../clock.js';
import { loadPageMax, reloadSoonDelayMs, type TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { LoadedTimer, Store } from '../store/store.js';
import type { ShardLeaseManager } from './shard-lease-manager.js';

export interface TimerLoaderOptions {
  store: Store;
  clock: Clock;
  timing: TimingConfig;
  logger: Logger;
  leases: ShardLeaseManager;
  /** Puts timers into the wheel (one already there stays as it is). */
  insert(timers: readonly LoadedTimer[]): void;
  /** Called at each refresh, before it reads. */
  onRefresh(): void;
  /** Every how many refreshes the whole window is reread (`SchedulerOptions.fullReloadEveryRefreshes`). */
  fullReloadEveryRefreshes: number;
}

export class TimerLoader {
  private refreshTimer: TimerHandle | null = null;
  /** The end of the window the last whole refresh read, or null when the next must read it all. */
  private loadedUntilMs: number | null = null;
  private refreshCount = 0;
  private stopped = false;
  private unsubscribeNearTimers: (() => void) | null = null;
  private unsubscribeMissed: (() => void) | null = null;

  constructor(private readonly options: TimerLoaderOptions) {}

  /** Listens for near timers and their loss; `armRefresh` starts the refreshes. */
  listen(): void {
    const { store, logger } = this.options;
    this.unsubscribeNearTimers = store.onNearTimers((timers) => this.acceptNearTimers(timers));
    this.unsubscribeMissed = store.onNearTimersMissed(() => {
      logger.warn('near-timer announcements may have been lost; rereading the whole load window');
      this.loadedUntilMs = null;
      this.reloadSoon();
    });
  }

  stop(): void {
    this.stopped = true;
    this.unsubscribeNearTimers?.();
    this.unsubscribeMissed?.();
    this.refreshTimer?.cancel();
  }

  armRefresh(): void {
    if (this.stopped) return;
    const { clock, timing } = this.options;
    this.refreshTimer = clock.setTimer(clock.nowMs() + timing.loadRefreshIntervalMs, async () => {
      this.refreshCount++;
      this.options.onRefresh();
      const whole = this.loadedUntilMs === null || this.refreshCount % this.options.fullReloadEveryRefreshes === 0;
      await this.loadShards(null, whole ? null : this.loadedUntilMs);
      this.armRefresh();
    });
  }

  /** Rereads the whole window of every shard held shortly (after a failed dispatch, or lost announcements). */
  reloadSoon(): void {
    if (this.stopped) return;
    const { clock } = this.options;
    clock.setTimer(clock.nowMs() + reloadSoonDelayMs, () => this.loadShards(null));
  }

  /**
   * Reads `[.., now + horizon)` of the given shards (all owned ones when null) into the wheel,
   * or with `fromMs` only `[fromMs, now + horizon)`: what the window gained since the last
   * refresh. Rereading a whole window of 100,000 timers every 30 s cost a quarter of a
   * herd's dispatch time (measured); timers created inside the window meanwhile came by the
   * near-timer path.
   */
  async loadShards(only: Set<number> | null, fromMs: number | null = null): Promise<void> {
    const { store, clock, timing, logger, leases } = this.options;
    const shards = leases.ownedShards().filter((shard) => only === null || only.has(shard));
    if (shards.length === 0 || this.stopped) return;
    const untilMs = clock.nowMs() + timing.loadHorizonMs;
    // (fire_at, timer_id) > (fromMs − 1, '') is fire_at ≥ fromMs: fire times are whole milliseconds.
    let after: { fireAtMs: number; timerId: string } | undefined = fromMs === null ? undefined : { fireAtMs: fromMs - 1, timerId: '' };
    try {
      for (;;) {
        const page = await store.loadTimers({ shards, untilMs, limit: loadPageMax, ...(after === undefined ? {} : { after }) });
        this.options.insert(page);
        if (page.length < loadPageMax || this.stopped) break;
        const last = page[page.length - 1]!;
        after = { fireAtMs: last.fireAtMs, timerId: last.timerId };
        // The embedded store answers synchronously: without a turn of the event loop between
        // pages, rereading a window of 300,000 timers held firing (and every request) for
        // 3 s — the precision benchmark's worst seconds, 30 s after start, were exactly that.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      // A load of every shard held is a whole window, wherever it came from (the first
      // acquire loads them all): the next refresh need only read what the window gained.
      if (only === null || leases.ownedShards().every((shard) => only.has(shard))) this.loadedUntilMs = untilMs;
    } catch (error) {
      this.loadedUntilMs = null;
      logger.error({ err: error }, 'loading timers failed; the next refresh rereads the whole window');
    }
  }

  /**
   * Near timers of the shards this node holds go into the wheel even while a late renewal
   * pauses firing: the dispatcher checks the lease when they come due. Dropped, they would
   * wait for the next whole-window reload (the incremental refreshes do not reread a window
   * already loaded).
   */
  private acceptNearTimers(timers: readonly LoadedTimer[]): void {
    if (this.stopped) return;
    const horizonEndMs = this.options.clock.nowMs() + this.options.timing.loadHorizonMs;
    this.options.insert(timers.filter((timer) => timer.fireAtMs < horizonEndMs && this.options.leases.holds(timer.shard)));
  }
}
