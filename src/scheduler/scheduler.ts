/**
 * One scheduler node, wired from its parts: shard leases (shard-lease-manager.ts), the loader
 * that fills the timing wheel with the next `loadHorizonMs` of the node's shards and takes
 * near timers (timer-loader.ts), the wheel driver that fires due entries through the
 * Dispatcher (wheel-driver.ts; when a timer comes out of the wheel, and whether its run is
 * written ahead, is herd-plan.ts; a `catch_up: all` backlog is paced by catch-up-pacing.ts),
 * the reconciler, and the worker-lease sweeper.
 *
 * Memory is bounded by the load window (DESIGN.md flow 4): the wheel only ever holds timers
 * due before `now + horizon`, loaded page by page, with payloads dropped.
 */
import type { Clock } from '../clock.js';
import { catchUpDispatchShareDefault, dispatchBatchMax, dispatchCapacityPerSecondDefault, shardCount, type TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { Store } from '../store/store.js';
import type { AlertWebhook } from '../obs/alert-webhook.js';
import { CatchUpPacer, catchUpSpacingMs } from './catch-up-pacing.js';
import { Dispatcher } from './dispatcher.js';
import { Reconciler } from './reconciler.js';
import { RunLeaseSweeper } from './run-lease-sweeper.js';
import { ScheduleCache } from './schedule-cache.js';
import { ShardLeaseManager, allShardsPlanner, type ShardPlanner } from './shard-lease-manager.js';
import { TimerLoader } from './timer-loader.js';
import { WheelDriver } from './wheel-driver.js';

export interface SchedulerOptions {
  store: Store;
  clock: Clock;
  nodeId: string;
  timing: TimingConfig;
  metrics: Metrics;
  logger: Logger;
  planner?: ShardPlanner;
  forceFirstAcquire?: boolean;
  /**
   * Every how many refreshes the loader rereads the whole window; the others read only what
   * the window gained since the last one, and near timers written meanwhile come announced.
   * When the store says announcements may have been lost (`onNearTimersMissed`: a PostgreSQL
   * LISTEN connection that reconnected), the next reload is a whole one, at once.
   */
  fullReloadEveryRefreshes?: number;
  /** Dispatches per second the node is sized for; `catch_up: all` backlogs get a share of it. */
  dispatchCapacityPerSecond?: number;
  /** Timers per dispatch transaction (default `dispatchBatchMax`; the embedded store wants more). */
  dispatchBatchMax?: number;
  /** Where the reconciler announces silent jobs (`--alert-webhook`); none by default. */
  alerts?: AlertWebhook | null;
}

export interface SchedulerStatus {
  shardsOwned: number;
  wheelTimers: number;
}

export class Scheduler {
  readonly leases: ShardLeaseManager;
  private readonly driver: WheelDriver;
  private readonly loader: TimerLoader;
  private readonly reconciler: Reconciler;
  private readonly sweeper: RunLeaseSweeper;
  private readonly schedules = new ScheduleCache();

  constructor(private readonly options: SchedulerOptions) {
    const { store, clock, metrics, logger, timing } = options;
    this.leases = new ShardLeaseManager({
      store, clock, metrics, logger, timing,
      nodeId: options.nodeId,
      planner: options.planner ?? allShardsPlanner(shardCount),
      forceFirstAcquire: options.forceFirstAcquire ?? false,
      onGained: (shards) => {
        void this.loader.loadShards(new Set(shards));
      },
      onLost: (shards) => this.driver.removeShards(new Set(shards)),
    });
    const batchMax = options.dispatchBatchMax ?? dispatchBatchMax;
    const dispatcher = new Dispatcher({ store, clock, leases: this.leases, schedules: this.schedules, metrics, logger,
      batchMax, herd: timing });
    const capacityPerSecond = options.dispatchCapacityPerSecond ?? dispatchCapacityPerSecondDefault;
    this.driver = new WheelDriver({ clock, metrics, logger, leases: this.leases, dispatcher, herd: timing, batchMax,
      pacer: new CatchUpPacer(catchUpSpacingMs(capacityPerSecond, catchUpDispatchShareDefault)),
      loadHorizonMs: timing.loadHorizonMs, onDispatchFailed: () => this.loader.reloadSoon() });
    this.loader = new TimerLoader({ store, clock, timing, logger, leases: this.leases,
      insert: (timers) => this.driver.insert(timers), onRefresh: () => this.driver.forgetPassedTicks(),
      fullReloadEveryRefreshes: options.fullReloadEveryRefreshes ?? 1 });
    this.reconciler = new Reconciler({ store, clock, metrics, logger, schedules: this.schedules,
      intervalMs: timing.reconcileIntervalMs, isLeader: () => this.leases.firingLease(0) !== null, alerts: options.alerts ?? null });
    this.sweeper = new RunLeaseSweeper({ store, clock, metrics, logger, intervalMs: timing.leaseSweepIntervalMs });
  }

  async start(): Promise<void> {
    this.loader.listen();
    await this.leases.start();
    // Read at each scrape: the timers of this node's wheel that fire before now + the window,
    // by their own fire time. A herd's are wheeled early, and once its runs are written ahead
    // they wait to be finished until after their fire time (`finishAheadDelayMs`): still due
    // then, as their runs become ready at it; the slots are walked that much further.
    this.options.metrics.setDueSource((windowMs) => {
      const nowMs = this.options.clock.nowMs();
      const limitMs = nowMs + windowMs;
      return this.driver.countDueBy(limitMs + this.options.timing.finishAheadDelayMs,
        (timer) => timer.fireAtMs < limitMs && (timer.dispatchedAhead !== true || timer.fireAtMs >= nowMs));
    });
    this.loader.armRefresh();
    this.reconciler.start();
    void this.sweeper.start();
  }

  /** Stops firing, waits for the batch in flight, and hands the shards back. */
  async stop(): Promise<void> {
    this.loader.stop();
    this.reconciler.stop();
    this.sweeper.stop();
    this.options.metrics.setDueSource(null);
    await this.driver.stop();
    await this.leases.stop();
    this.driver.clear();
  }

  status(): SchedulerStatus {
    return { shardsOwned: this.leases.ownedShards().length, wheelTimers: this.driver.size };
  }

  /** A worker lease or retry was granted with this deadline; make sure the sweeper wakes for it. */
  noteRunDeadline(atMs: number): void {
    this.sweeper.noteDeadline(atMs);
  }
}
