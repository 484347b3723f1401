/**
 * One scheduler node: shard leases, the loader that fills a timing wheel with the next
 * `loadHorizonMs` of the node's shards, the near-timer path, the wheel driver that fires
 * due entries through the Dispatcher, the reconciler, and the worker-lease sweeper.
 *
 * Memory is bounded by the load window (DESIGN.md flow 4): the wheel only ever holds timers
 * due before `now + horizon`, loaded page by page, with payloads dropped.
 */
import type { Clock, TimerHandle } from '../clock.js';
import { TimingWheel } from '../domain/timing-wheel.js';
import { catchUpDispatchShareDefault, dispatchBatchMax, loadPageMax, shardCount, wheelTickMs, type TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { LoadedTimer, Store } from '../store/store.js';
import { Dispatcher, isOneShot } from './dispatcher.js';
import { Reconciler } from './reconciler.js';
import { RunLeaseSweeper } from './run-lease-sweeper.js';
import type { AlertWebhook } from '../obs/alert-webhook.js';
import { ScheduleCache } from './schedule-cache.js';
import { ShardLeaseManager, allShardsPlanner, type ShardPlanner } from './shard-lease-manager.js';

/** How soon a timer held back by a late lease renewal is tried again. */
const heldBackRetryDelayMs = 100;
/**
 * Under the virtual clock, timers due within this long of the earliest fire together at the
 * last of them. Below the shortest cron period (1 s), so a late fire never makes the next
 * occurrence look missed.
 */
const virtualBatchWindowMs = 500;

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
  private readonly wheel: TimingWheel<LoadedTimer>;
  private readonly dispatcher: Dispatcher;
  private readonly reconciler: Reconciler;
  private readonly sweeper: RunLeaseSweeper;
  private readonly schedules = new ScheduleCache();
  private wakeTimer: TimerHandle | null = null;
  private wakeAtMs = Infinity;
  private refreshTimer: TimerHandle | null = null;
  /** The end of the window the last whole refresh read, or null when the next must read it all. */
  private loadedUntilMs: number | null = null;
  private refreshCount = 0;
  private firing: Promise<void> | null = null;
  private stopped = false;
  private unsubscribeNearTimers: (() => void) | null = null;
  private unsubscribeMissed: (() => void) | null = null;
  private catchUpNextSlotMs = 0;
  private readonly catchUpSpacingMs: number;
  /** How early one-shot timers are wheeled, to be dispatched ahead (0 when the store cannot). */
  private readonly dispatchAheadMs: number;
  /** Timers per dispatch transaction; also the early work a pass takes between looks at the wheel. */
  private readonly batchMax: number;
  /**
   * One-shot timers wheeled early so far, per wheel tick of their fire time: a herd's size,
   * which sets how far ahead its later members are wheeled and whether it is dispatched ahead
   * at all. A tick's count is dropped once its time has passed (at each refresh).
   */
  private readonly earlyPerTick = new Map<number, number>();

  constructor(private readonly options: SchedulerOptions) {
    const { store, clock, metrics, logger, timing } = options;
    this.wheel = new TimingWheel({ tickMs: wheelTickMs, startMs: clock.nowMs() });
    this.leases = new ShardLeaseManager({
      store, clock, metrics, logger, timing,
      nodeId: options.nodeId,
      planner: options.planner ?? allShardsPlanner(shardCount),
      forceFirstAcquire: options.forceFirstAcquire ?? false,
      onGained: (shards) => {
        void this.loadShards(new Set(shards));
      },
      onLost: (shards) => {
        const lost = new Set(shards);
        this.wheel.removeWhere((timer) => lost.has(timer.shard));
        metrics.wheelTimers.set(this.wheel.size);
      },
    });
    this.dispatchAheadMs = store.dispatchesAhead ? timing.dispatchAheadMs : 0;
    this.batchMax = options.dispatchBatchMax ?? dispatchBatchMax;
    this.dispatcher = new Dispatcher({ store, clock, leases: this.leases, schedules: this.schedules, metrics, logger,
      batchMax: this.batchMax, dispatchAheadMs: this.dispatchAheadMs });
    this.reconciler = new Reconciler({ store, clock, metrics, logger, schedules: this.schedules,
      intervalMs: timing.reconcileIntervalMs, isLeader: () => this.leases.firingLease(0) !== null, alerts: options.alerts ?? null });
    this.sweeper = new RunLeaseSweeper({ store, clock, metrics, logger, intervalMs: timing.leaseSweepIntervalMs });
    const catchUpPerSecond = (options.dispatchCapacityPerSecond ?? 5_000) * catchUpDispatchShareDefault;
    this.catchUpSpacingMs = 1_000 / catchUpPerSecond;
  }

  async start(): Promise<void> {
    this.unsubscribeNearTimers = this.options.store.onNearTimers((timers) => this.acceptNearTimers(timers));
    this.unsubscribeMissed = this.options.store.onNearTimersMissed(() => {
      this.options.logger.warn('near-timer announcements may have been lost; rereading the whole load window');
      this.loadedUntilMs = null;
      this.scheduleReloadSoon();
    });
    await this.leases.start();
    // Read at each scrape: the timers of this node's wheel that fire before now + the window,
    // by their own fire time. A herd's are wheeled early, and once its runs are written ahead
    // they wait to be finished until after their fire time (`finishAheadDelayMs`): still due
    // then, as their runs become ready at it; the slots are walked that much further.
    this.options.metrics.setDueSource((windowMs) => {
      const nowMs = this.options.clock.nowMs();
      const limitMs = nowMs + windowMs;
      return this.wheel.countDueBy(limitMs + this.options.timing.finishAheadDelayMs,
        (timer) => timer.fireAtMs < limitMs && (timer.dispatchedAhead !== true || timer.fireAtMs >= nowMs));
    });
    this.armRefresh();
    this.reconciler.start();
    void this.sweeper.start();
  }

  /** Stops firing, waits for the batch in flight, and hands the shards back. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribeNearTimers?.();
    this.unsubscribeMissed?.();
    this.wakeTimer?.cancel();
    this.refreshTimer?.cancel();
    this.reconciler.stop();
    this.sweeper.stop();
    this.options.metrics.setDueSource(null);
    await this.firing;
    await this.leases.stop();
    this.wheel.clear();
    this.earlyPerTick.clear();
  }

  status(): SchedulerStatus {
    return { shardsOwned: this.leases.ownedShards().length, wheelTimers: this.wheel.size };
  }

  /** A worker lease or retry was granted with this deadline; make sure the sweeper wakes for it. */
  noteRunDeadline(atMs: number): void {
    this.sweeper.noteDeadline(atMs);
  }

  private armRefresh(): void {
    if (this.stopped) return;
    const { clock, timing } = this.options;
    this.refreshTimer = clock.setTimer(clock.nowMs() + timing.loadRefreshIntervalMs, async () => {
      this.refreshCount++;
      this.forgetPassedTicks();
      const whole = this.loadedUntilMs === null || this.refreshCount % (this.options.fullReloadEveryRefreshes ?? 1) === 0;
      await this.loadShards(null, whole ? null : this.loadedUntilMs);
      this.armRefresh();
    });
  }

  /**
   * Reads `[.., now + horizon)` of the given shards (all owned ones when null) into the wheel,
   * or with `fromMs` only `[fromMs, now + horizon)`: what the window gained since the last
   * refresh. Rereading a whole window of 100,000 timers every 30 s cost a quarter of a
   * herd's dispatch time (measured); timers created inside the window meanwhile came by the
   * near-timer path.
   */
  private async loadShards(only: Set<number> | null, fromMs: number | null = null): Promise<void> {
    const { store, clock, timing, logger, metrics } = this.options;
    const shards = this.leases.ownedShards().filter((shard) => only === null || only.has(shard));
    if (shards.length === 0 || this.stopped) return;
    const untilMs = clock.nowMs() + timing.loadHorizonMs;
    // (fire_at, timer_id) > (fromMs − 1, '') is fire_at ≥ fromMs: fire times are whole milliseconds.
    let after: { fireAtMs: number; timerId: string } | undefined = fromMs === null ? undefined : { fireAtMs: fromMs - 1, timerId: '' };
    try {
      for (;;) {
        const page = await store.loadTimers({ shards, untilMs, limit: loadPageMax, ...(after === undefined ? {} : { after }) });
        this.insertTimers(page);
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
      if (only === null || this.leases.ownedShards().every((shard) => only.has(shard))) this.loadedUntilMs = untilMs;
    } catch (error) {
      this.loadedUntilMs = null;
      logger.error({ err: error }, 'loading timers failed; the next refresh rereads the whole window');
    }
    metrics.wheelTimers.set(this.wheel.size);
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
    this.insertTimers(timers.filter((timer) => timer.fireAtMs < horizonEndMs && this.leases.holds(timer.shard)));
  }

  private insertTimers(timers: readonly LoadedTimer[]): void {
    if (timers.length === 0) return;
    for (const timer of timers) {
      // A timer's fire time never changes (PATCH writes a new timer), so one already wheeled —
      // perhaps paced as a catch-up, or held back for a lease — stays as it is.
      if (this.wheel.has(timer.timerId)) continue;
      // Payloads stay in the store: the wheel holds what firing needs, nothing more.
      this.wheel.insert(timer.timerId, this.wheelAtMs(timer), { ...timer, spec: { ...timer.spec, payload: null } });
    }
    this.options.metrics.wheelTimers.set(this.wheel.size);
    this.armWake();
  }

  /**
   * When a timer comes out of the wheel: a one-shot job's `dispatchAheadMs` before its fire
   * time (a big herd's later members up to twice that: `herdLeadMs`; counted here into its
   * tick's herd), at the start of that wheel tick, so a herd's runs, or a dense stream's a
   * tick at a time, are written before their time and only leases and completions are left at it
   * (DispatchItem.stage); one whose run was written ahead, `finishAheadDelayMs` after the end
   * of its fire time's tick, to finish (its run is leasable from its fire time whenever the
   * timer is consumed, so a herd's finishes wait until its leases are done, and a stream's
   * go a tick at a time); every other, at its fire time.
   */
  private wheelAtMs(timer: LoadedTimer): number {
    if (this.dispatchAheadMs > 0 && timer.dispatchedAhead !== true && isOneShot(timer)) {
      const tick = Math.floor(timer.fireAtMs / wheelTickMs);
      const count = (this.earlyPerTick.get(tick) ?? 0) + 1;
      this.earlyPerTick.set(tick, count);
      return Math.floor((timer.fireAtMs - this.herdLeadMs(count)) / wheelTickMs) * wheelTickMs;
    }
    return timer.dispatchedAhead === true
      ? Math.ceil(timer.fireAtMs / wheelTickMs) * wheelTickMs + this.options.timing.finishAheadDelayMs
      : timer.fireAtMs;
  }

  /**
   * How far ahead the `count`-th one-shot timer of a tick is wheeled: `dispatchAheadMs`, and a
   * second more for each `dispatchAheadTimersPerSecond` of its tick already wheeled, up to
   * twice `dispatchAheadMs`. A herd is then dispatched in chunks, its latest-wheeled members
   * first, and written before workers leasing ahead reach it (limits.ts).
   */
  private herdLeadMs(count: number): number {
    const extraMs = Math.floor(count / this.options.timing.dispatchAheadTimersPerSecond) * 1_000;
    return this.dispatchAheadMs + Math.min(extraMs, this.dispatchAheadMs);
  }

  /** Drops the herd sizes of ticks whose time has passed: no timer of theirs is early any more. */
  private forgetPassedTicks(): void {
    const nowTick = Math.floor(this.options.clock.nowMs() / wheelTickMs);
    for (const tick of this.earlyPerTick.keys()) {
      if (tick < nowTick) this.earlyPerTick.delete(tick);
    }
  }

  /**
   * Arms the clock for the wheel's earliest entry, unless an earlier wake is armed.
   *
   * In real time that is the entry's own millisecond. Batching needs no window: the pass
   * takes everything due when it wakes, and timers coming due while a dispatch is in flight
   * go in the next one, so batches grow with the load as a group commit's do. (A wake at the
   * last entry of the entry's 10 ms wheel tick put 0-10 ms on every fire: with 2,000 timers
   * due a second, p99 14 ms at the worker.)
   *
   * Under the virtual clock it is the last entry due within `virtualBatchWindowMs`, cut at
   * the target of the advance in progress, so no advance ends before a timer due within it
   * has fired: an advance steps to each wake-up, and a spread herd of 100,000 timers was
   * 100,000 dispatches.
   */
  private armWake(): void {
    if (this.stopped || this.firing !== null) return;
    const firstMs = this.wheel.nextDueMs();
    if (firstMs === null) return;
    const { clock } = this.options;
    const advancingToMs = clock.advancingToMs?.() ?? null;
    const wakeAtMs = clock.isVirtual
      ? Math.max(firstMs, this.wheel.lastDueBy(Math.min(firstMs + virtualBatchWindowMs - 1, advancingToMs ?? firstMs)) ?? firstMs)
      : firstMs;
    if (wakeAtMs >= this.wakeAtMs) return;
    this.wakeTimer?.cancel();
    this.wakeAtMs = wakeAtMs;
    this.wakeTimer = clock.setTimer(wakeAtMs, () => this.fire());
  }

  /** Fires everything due, batch after batch, until the wheel has nothing due. */
  private fire(): Promise<void> {
    this.wakeTimer = null;
    this.wakeAtMs = Infinity;
    if (this.firing !== null) return this.firing;
    // Start the pass on a later microtask: run synchronously, a pass with nothing due would
    // reach its `finally` (firing = null) before this assignment, leaving a settled promise
    // in `firing` and the node never arming its wake again.
    this.firing = Promise.resolve().then(async () => {
      const early = new EarlyWork();
      try {
        for (;;) {
          if (this.stopped) return;
          const nowMs = this.options.clock.nowMs();
          const fresh = this.notHerdsBackToTheirTime(this.wheel.advance(nowMs), nowMs);
          // Timers at their fire time first, all of them; then one batch of early work. The
          // rest of it waits for the next turn of this loop, which looks at the wheel again:
          // 20,000 timers written ahead in one go kept timers coming due meanwhile waiting
          // 1-3 s behind ~40 dispatch transactions on PostgreSQL (bench/probes/lag-stages.ts --store postgres).
          const due = fresh.filter((timer) => !isEarlyWork(timer, nowMs));
          early.add(fresh.filter((timer) => isEarlyWork(timer, nowMs)));
          due.push(...early.take(this.batchMax));
          // Empty also when every due timer went back to its own time: those are not due yet.
          if (due.length === 0) return;
          const outcome = await this.dispatcher.dispatch(due);
          this.requeue(outcome.nextTimers);
          this.retryHeldBack(outcome.heldBack);
          // Give the event loop a turn between batches. A batch whose timers were all held
          // back awaits nothing real, and with timers due every millisecond the next batch
          // is never empty: without this the pass ran on microtasks forever, and the lease
          // renewal that would have let it fire, and SIGTERM, never ran.
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      } catch (error) {
        this.options.logger.error({ err: error }, 'dispatch failed; its timers stay pending and are reloaded');
        this.scheduleReloadSoon();
      } finally {
        this.firing = null;
        this.options.metrics.wheelTimers.set(this.wheel.size);
        this.armWake();
      }
    });
    return this.firing;
  }

  /**
   * One-shot timers wheeled early (`wheelAtMs`) are dispatched ahead only as part of a herd:
   * at least `dispatchAheadMinTimers` of them wheeled for one tick of fire times (counted
   * over the tick, not over this pass: a big herd comes due in chunks). The others go back
   * into the wheel at their own fire time, to be fired whole then.
   */
  private notHerdsBackToTheirTime(due: LoadedTimer[], nowMs: number): LoadedTimer[] {
    if (this.dispatchAheadMs === 0) return due;
    const early = (timer: LoadedTimer): boolean => timer.dispatchedAhead !== true && isOneShot(timer) && timer.fireAtMs > nowMs;
    const herdMin = this.options.timing.dispatchAheadMinTimers;
    if (!due.some((timer) => early(timer) && this.earlyCountOf(timer) < herdMin)) return due;
    return due.filter((timer) => {
      if (!early(timer) || this.earlyCountOf(timer) >= herdMin) return true;
      this.wheel.insert(timer.timerId, timer.fireAtMs, timer);
      return false;
    });
  }

  private earlyCountOf(timer: LoadedTimer): number {
    return this.earlyPerTick.get(Math.floor(timer.fireAtMs / wheelTickMs)) ?? 0;
  }

  /**
   * Next occurrences go straight back into the wheel when within the horizon. An overdue one
   * is a `catch_up: all` backlog: it is paced at a share of dispatch capacity so that a
   * backlog cannot starve current work.
   */
  private requeue(nextTimers: readonly LoadedTimer[]): void {
    const nowMs = this.options.clock.nowMs();
    const horizonEndMs = nowMs + this.options.timing.loadHorizonMs;
    for (const timer of nextTimers) {
      if (timer.fireAtMs >= horizonEndMs) continue;
      // Kept by an ahead stage: finished at the end of its tick; every other, at its fire time
      // (a one-shot kept unmarked, beside an active run, is fired whole then, not ahead again).
      let wheelAtMs = timer.dispatchedAhead === true ? this.wheelAtMs(timer) : timer.fireAtMs;
      // A timer kept by a dispatch ahead is finished at its time, overdue or not: not paced.
      if (timer.fireAtMs < nowMs && timer.dispatchedAhead !== true) {
        this.catchUpNextSlotMs = Math.max(nowMs, this.catchUpNextSlotMs + this.catchUpSpacingMs);
        wheelAtMs = this.catchUpNextSlotMs;
      }
      this.wheel.insert(timer.timerId, wheelAtMs, timer);
    }
  }

  /**
   * Timers of a shard whose lease renewal is late go back into the wheel a little later: by
   * then the renewal has usually landed and they fire; if the shard was lost meanwhile,
   * onLost has cleared it and they are not put back.
   */
  private retryHeldBack(timers: readonly LoadedTimer[]): void {
    const retryAtMs = this.options.clock.nowMs() + heldBackRetryDelayMs;
    for (const timer of timers) {
      if (this.leases.holds(timer.shard)) this.wheel.insert(timer.timerId, retryAtMs, timer);
    }
  }

  private scheduleReloadSoon(): void {
    if (this.stopped) return;
    const { clock } = this.options;
    clock.setTimer(clock.nowMs() + 1_000, () => this.loadShards(null));
  }
}

/**
 * Work done ahead of a timer's time: writing a one-shot's run before its fire time (stage
 * `ahead`), and finishing one whose run was written so (stage `finish`, after the fire time).
 * A late pass over it delays no run; a timer firing whole at its time is a run's dispatch.
 */
function isEarlyWork(timer: LoadedTimer, nowMs: number): boolean {
  return timer.dispatchedAhead === true || (isOneShot(timer) && timer.fireAtMs > nowMs);
}

/** Early work a firing pass has taken out of the wheel and not dispatched yet, in wheel order. */
class EarlyWork {
  private readonly timers: LoadedTimer[] = [];
  private start = 0;

  add(timers: readonly LoadedTimer[]): void {
    for (const timer of timers) this.timers.push(timer);
  }

  take(count: number): LoadedTimer[] {
    const taken = this.timers.slice(this.start, this.start + count);
    this.start += taken.length;
    if (this.start === this.timers.length) {
      this.timers.length = 0;
      this.start = 0;
    }
    return taken;
  }
}
